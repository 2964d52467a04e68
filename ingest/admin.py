"""Django's admin autodiscovery imports ``<app>.admin`` of every installed app; the ingest
runs' model admins live in ``ingest.runs.admin``, and importing it registers them."""

from __future__ import annotations

from ingest.runs import admin

__all__ = ["admin"]
