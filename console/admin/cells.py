"""Cells the pipelines' admins share: a link to a job, shown as a link only to whom may
view jobs, and a refusal's text as a sentence."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet, Value
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

if TYPE_CHECKING:
    # A mixin goes before ``admin.ModelAdmin``: what it calls through ``super()`` is its.
    _Admin = admin.ModelAdmin[Any]
else:
    _Admin = object

VIEW_JOBS = "jobs.view_job"


def job_link(job_id: int | None, *, viewable: bool) -> SafeString:
    """``#42`` linking to the job's page when ``viewable``; plain text otherwise (no job
    foreign key: the engine's retention may have pruned the job since)."""
    if job_id is None:
        return format_html("{}", "—")
    if not viewable:
        return format_html("#{}", job_id)
    return format_html('<a href="{}">#{}</a>', reverse("admin:jobs_job_change", args=[job_id]), job_id)


def may_view_jobs(request: HttpRequest) -> bool:
    return bool(request.user.has_perm(VIEW_JOBS))


class JobLinks(_Admin):
    """Mix in before ``admin.ModelAdmin`` or an inline to use ``job_cell``: a display
    callable gets no request, so the rows carry whether the user may view jobs."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(jobs_viewable=Value(may_view_jobs(request)))


def job_cell(field: str, description: str = "job", **display: Any) -> Callable[[Any, Any], SafeString]:
    """A column or read-only field of a ``JobLinks`` admin: the job whose id is in
    ``field`` (``job_id``), linked for whom may view jobs."""

    @admin.display(description=description, **display)
    def cell(model_admin: Any, row: Any) -> SafeString:
        return job_link(getattr(row, field), viewable=getattr(row, "jobs_viewable", False))

    return cell


def sentence(text: str) -> str:
    """``text`` with a capital first letter and a full stop: a refusal read in a message."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
