"""Django's admin autodiscovery imports ``<app>.admin`` of every installed app; the ingest
model admins live in ``ingest.runs.admin`` (sources, runs, breakers) and
``ingest.scraping.admin`` (scrape runs, references, handoffs), and importing them
registers them."""

from __future__ import annotations

from ingest.runs import admin as runs_admin
from ingest.scraping import admin as scraping_admin

__all__ = ["runs_admin", "scraping_admin"]
