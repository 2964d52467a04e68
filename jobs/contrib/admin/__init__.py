"""The engine in the Django admin: the operators' window on jobs, events and workers.

Jobs change state only through ``jobs.engine``: their pages are read-only, and the
operator actions (recover, retry, cancel, run now) call the engine with the staff user
as actor, so every one lands in the job's history and in the admin log. The lists must
stay fast on millions of rows: counts are capped, every filter and search is served by an
index declared on the models, and no filter's choices come from scanning the jobs table.

``lists`` holds that list machinery; ``job``, ``events`` and ``workers`` register one
model admin each (importing them here is what registers them); ``dashboard`` is the
operators' dashboard page, routed through ``JobAdmin.get_urls``.
"""

from __future__ import annotations

from jobs.admin import dashboard, events, job, lists, workers

__all__ = ["dashboard", "events", "job", "lists", "workers"]
