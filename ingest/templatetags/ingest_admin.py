"""Django finds a template tag library only in the ``templatetags`` package of an
installed app. The ingest admin's templates load ``ingest_admin``; its filters are those
of ``ingest.runs.rendering``."""

from __future__ import annotations

from ingest.runs.rendering import register

__all__ = ["register"]
