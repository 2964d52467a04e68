"""Django finds a template tag library only in the ``templatetags`` package of an
installed app. The engine's admin templates load ``jobs_admin``; its filters are those of
``jobs.contrib.admin.rendering``."""

from __future__ import annotations

from jobs.contrib.admin.rendering import register

__all__ = ["register"]
