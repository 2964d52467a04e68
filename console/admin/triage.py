"""The failure triage pages: failed jobs grouped by type and error pattern
(``console.triage``), each group with its size, its span, the tenants it touched
and its newest traceback, and "retry all in this group" after a preview and a reason.

An operator who fixed a cause retries its group in two clicks: *Retry N jobs* on the
group's row, then *Yes* under the preview. Each job is retried through the engine, with
the reason in its history and in the admin's log, under the operator's name. Where some
of the jobs work for something with a retry of its own (a run whose hooks failed: the
job-subject registry's ``replaces_retry``), the preview says so first and offers that
retry.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, re_path, reverse
from django.utils.http import urlencode

from console import triage
from console.admin.operations import OPERATIONS, REASON_CHARS, may_operate, operate
from console.admin.rendering import MAX_BULK, format_duration
from console.admin.subjects import Subject
from console.admin.subjects import subjects as job_subjects
from jobs.errors import IllegalTransition
from jobs.models import Job
from tenancy.scoping import scope_queryset

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

# Jobs retried by one confirmation, newest first: the bulk actions' bound (one engine
# transition per job; a page that took minutes to answer would be submitted twice).
MAX_RETRY = MAX_BULK
# Jobs named on the preview, beside the counts.
PREVIEW_ROWS = 20
# Subjects with a retry of their own named on the preview, with that retry; the rest
# are counted.
OWN_RETRIES_SHOWN = 10


def urls(model_admin: ModelAdmin[Job]) -> list[URLPattern]:
    """``admin:jobs_job_triage`` and ``admin:jobs_job_triage_retry``, for ``get_urls``."""
    view = model_admin.admin_site.admin_view

    def groups(request: HttpRequest) -> HttpResponse:
        return groups_view(model_admin, request)

    def retry(request: HttpRequest, group: str) -> HttpResponse:
        return retry_view(model_admin, request, group)

    return [
        path("triage/", view(groups), name="jobs_job_triage"),
        re_path(r"^triage/(?P<group>[0-9a-f]{32})/retry/$", view(retry), name="jobs_job_triage_retry"),
    ]


def list_url(group: triage.FailureGroup, window: str) -> str:
    """The job list narrowed to the group (``FailureGroupFilter``)."""
    query = urlencode({"failure": f"{window}:{group.fingerprint}"})
    return f"{reverse('admin:jobs_job_changelist')}?{query}"


def retry_url(group: triage.FailureGroup, window: str) -> str:
    """The group's preview page (its *Retry N jobs* button)."""
    url = reverse("admin:jobs_job_triage_retry", args=[group.fingerprint])
    return f"{url}?{urlencode({'window': window})}"


def _window(request: HttpRequest) -> str:
    window = request.GET.get("window") or request.POST.get("window") or triage.DEFAULT_WINDOW
    if window not in triage.WINDOWS:
        messages.warning(request, f"Unknown window {window!r}: showing the last {triage.DEFAULT_WINDOW}.")
        return triage.DEFAULT_WINDOW
    return window


def _context(model_admin: ModelAdmin[Job], request: HttpRequest, title: str) -> dict[str, Any]:
    request.current_app = model_admin.admin_site.name
    return {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": Job._meta,
        "windows": list(triage.WINDOWS),
    }


def groups_view(model_admin: ModelAdmin[Job], request: HttpRequest) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    window = _window(request)
    jobs = scope_queryset(Job.objects.all(), request.user)
    found = triage.groups(jobs, triage.window_start(window))
    subjects = job_subjects(request, [group.sample for group in found])
    rows = [
        {
            "group": group,
            "list_url": list_url(group, window),
            "retry_url": retry_url(group, window),
            "subject": subjects.get(group.sample.pk),
        }
        for group in found
    ]
    context = {
        **_context(model_admin, request, "Failures by cause"),
        "window": window,
        "rows": rows,
        "newest": triage.NEWEST,
        "more": triage.more_than(jobs, triage.window_start(window)),
        "can_retry": may_operate(request),
        "limit": triage.GROUP_LIMIT,
    }
    return TemplateResponse(request, "admin/jobs/triage.html", context)


def retry_view(model_admin: ModelAdmin[Job], request: HttpRequest, group: str) -> HttpResponse:
    """GET: the preview (how many jobs, which tenants, the first of them). POST with a
    reason: each job retried by the engine, as the staff user."""
    if not may_operate(request):
        raise PermissionDenied
    window = _window(request)
    since = triage.window_start(window)
    jobs = scope_queryset(Job.objects.all(), request.user)
    found = triage.find(jobs, since, group)
    if found is None:
        raise Http404("No failure of this group is left in the window: it may have been retried already.")
    members = triage.members(jobs, since, group).order_by("-id")
    reason = request.POST.get("reason", "").strip()[:REASON_CHARS]
    if request.method == "POST" and reason:
        # What the preview showed: no newer failure of the group is retried unseen.
        upto = _int(request.POST.get("upto")) or found.sample.pk
        chosen = list(members.filter(pk__lte=upto).defer("payload", "result")[:MAX_RETRY])
        done, refusals = _retry_all(model_admin, request, chosen, found, reason)
        messages.success(request, f"{done:,} job(s) of {found.type} “{found.pattern}” retried.")
        for why, count in refusals.items():
            messages.warning(request, f"{count:,} job(s) left alone: {why}.")
        return redirect(f"{reverse('admin:jobs_job_triage')}?{urlencode({'window': window})}")
    if request.method == "POST":
        messages.error(request, "Say why: the reason goes into each job's history.")
    tenants = list(
        members.filter(tenant__isnull=False).order_by().values_list("tenant__name", flat=True).distinct()[:20]
    )
    # What "Yes" would retry (the POST's choice, ``upto`` the newest now).
    chosen = list(members.filter(pk__lte=found.sample.pk).defer("result", "last_error")[:MAX_RETRY])
    own, more, own_jobs = own_retries(request, chosen)
    preview = list(members.select_related("tenant").defer("result", "last_error")[:PREVIEW_ROWS])
    subjects = job_subjects(request, preview)
    for job in preview:
        job.subject = subjects.get(job.pk)  # type: ignore[attr-defined]
    context = {
        **_context(
            model_admin, request, f"Retry {min(found.count, MAX_RETRY):,} failed {found.type} job(s)?"
        ),
        "group": found,
        "window": window,
        "preview": preview,
        "upto": found.sample.pk,
        "touch": min(found.count, MAX_RETRY),
        "left": max(found.count - MAX_RETRY, 0),
        "tenants": tenants,
        "list_url": list_url(found, window),
        "reason": reason,
        "span": format_duration((found.last_seen - found.first_seen).total_seconds()),
        "own_retries": own,
        "own_retry_more": more,
        "own_retry_jobs": own_jobs,
    }
    return TemplateResponse(request, "admin/jobs/triage_retry.html", context)


@dataclass(frozen=True)
class OwnRetry:
    """What some of a group's jobs work for, whose own retry is the fix: ``subject``
    with its actions, ``reason`` why the jobs' retry is not enough, and how many
    ``jobs`` of the group work for it."""

    subject: Subject
    reason: str
    jobs: int


def own_retries(request: HttpRequest, chosen: list[Job]) -> tuple[list[OwnRetry], int, int]:
    """Of the subjects ``chosen`` work for, those with a retry of their own: the first
    ``OWN_RETRIES_SHOWN`` with their actions, how many more, and how many of the jobs
    work for one. One resolver call per type for the list, one more for the detail of
    those shown."""
    brief = job_subjects(request, chosen)
    by_subject: dict[str, list[Job]] = {}
    for job in chosen:
        subject = brief.get(job.pk)
        if subject is not None and subject.replaces_retry:
            by_subject.setdefault(subject.url, []).append(job)
    shown = list(by_subject.values())[:OWN_RETRIES_SHOWN]
    detailed = job_subjects(request, [group[0] for group in shown], detail=True)
    found = []
    for group in shown:
        listed = brief[group[0].pk]
        subject = detailed.get(group[0].pk, listed)
        found.append(OwnRetry(subject, subject.replaces_retry or listed.replaces_retry, len(group)))
    return found, len(by_subject) - len(found), sum(len(group) for group in by_subject.values())


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) < 19 else None


def _retry_all(
    model_admin: ModelAdmin[Job],
    request: HttpRequest,
    chosen: list[Job],
    found: triage.FailureGroup,
    reason: str,
) -> tuple[int, dict[str, int]]:
    """Each job retried by the engine; the refusals counted by their reason (retried by
    someone else since the preview, a key another job holds now)."""
    retry = OPERATIONS["retry"]
    note = f"retried with its failure group “{found.pattern}”: {reason}"[:REASON_CHARS]
    done, refusals = 0, Counter[str]()
    for job in chosen:
        try:
            operate(model_admin, request, retry, job, note)
        except IllegalTransition as exc:
            refusals[_cause(str(exc), job.pk)] += 1
            continue
        done += 1
    return done, dict(refusals)


def _cause(message: str, job_id: int) -> str:
    """An engine refusal without its job's number, so that alike ones count together."""
    return message.replace(f"job {job_id} ", "the job ", 1)
