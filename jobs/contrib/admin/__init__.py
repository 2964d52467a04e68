"""The engine in the Django admin: the operators' window on jobs, events and workers.

Jobs change state only through ``jobs.engine``: their pages are read-only, and the
operator actions (recover, retry, cancel, run now) call the engine with the staff user
as actor, so every one lands in the job's history and in the admin log. The lists must
stay fast on millions of rows: counts are capped, every filter and search is served by an
index declared on the models, and no filter's choices come from scanning the jobs table.

``lists`` holds that list machinery; ``job``, ``events``, ``outbox`` (the deliveries:
the outbox console) and ``workers`` register one model admin each (``jobs/admin.py``
imports them, which is what registers them);
``dashboard`` is the operators' dashboard page, routed through ``JobAdmin.get_urls``,
drawing its charts with ``charts``; ``pipeline`` is the pipeline page; ``rendering``
holds the badges and durations shared by the pages' code and their templates.

Other apps' admins build on the pieces listed in ``__all__``.
"""

from __future__ import annotations

from jobs.contrib.admin.lists import CappedCountPaginator
from jobs.contrib.admin.readonly import ReadOnlyMixin

__all__ = ["CappedCountPaginator", "ReadOnlyMixin"]
