"""The engine in the Django admin: the operators' window on jobs, events and workers.

Jobs change state only through ``jobs.engine``: their pages are read-only, and the
operator actions (recover, retry, cancel, run now) call the engine with the staff user
as actor, so every one lands in the job's history and in the admin log. The lists must
stay fast on millions of rows: counts are capped, every filter and search is served by an
index declared on the models, and no filter's choices come from scanning the jobs table.

``lists`` holds that list machinery; ``job``, ``events``, ``outbox`` (the deliveries:
the outbox console) and ``workers`` register one model admin each, which this package
imports: Django's admin autodiscovery imports ``console.admin``, and so do the other
apps' admins that build on it. ``dashboard`` is the operators' dashboard page, routed
through ``JobAdmin.get_urls``, drawing its charts with ``charts``; ``pipeline`` is the
pipeline page; ``triage`` the failure groups; ``overview`` the engine's part of the front
page; ``rendering`` holds the badges and durations shared by the pages' code and their
templates.

Other apps' admins build on the pieces listed in ``__all__``: ``Operation`` for every
operator action (``operations``) and ``PageOperations`` for an object's own buttons on its
page (``page_operations``), the ``job_link`` cell, the read-only bases, the history
inline every ``jobs.History`` table is shown with (``history``), the capped paginator,
choice filters and bulk selection; their front-page figures (``<app>/overview.py``,
registered with ``front_page_figures``: ``console.figures``) are ``Figure``s shown to whom
``viewable_admin`` lets in; and each says what its jobs work for with
``register_job_subject`` (``subjects``).
"""

from __future__ import annotations

from console.admin import events, job, outbox, workers  # noqa: F401  (registers the model admins)
from console.admin.cells import JobLinks, job_cell, job_link, may_view_jobs, sentence
from console.admin.history import HistoryInline
from console.admin.lists import CappedCountPaginator, ChoiceFilter
from console.admin.operations import Operation
from console.admin.overview import Figure, viewable_admin
from console.admin.page_operations import PageOperations
from console.admin.readonly import ReadOnlyAdmin, ReadOnlyInline, ReadOnlyMixin
from console.admin.rendering import bulk_selection
from console.admin.subjects import Subject, SubjectAction, register_job_subject
from console.figures import front_page_figures

__all__ = [
    "CappedCountPaginator",
    "ChoiceFilter",
    "Figure",
    "HistoryInline",
    "JobLinks",
    "Operation",
    "PageOperations",
    "ReadOnlyAdmin",
    "ReadOnlyInline",
    "ReadOnlyMixin",
    "Subject",
    "SubjectAction",
    "bulk_selection",
    "front_page_figures",
    "job_cell",
    "job_link",
    "may_view_jobs",
    "register_job_subject",
    "sentence",
    "viewable_admin",
]
