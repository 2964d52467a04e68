"""What a handoff's jobs work for: the handoff (``console.admin.register_job_subject``).

``ingest.IngestReference`` names its handoff; ``ingest.SettleHandoff`` names the run
whose outcome it settles, and the handoff points at that run.

A run that ingests a scraped reference is its handoff's ingestion: the run's own jobs
(its hooks, its ingester) work for the run and, through it, for the handoff. Their
subject is the run's with the handoff added (``run_and_handoff_subjects``): a link, the
handoff's state and, once it failed, its retry beside the run's. The runs know nothing
of the scraper built on them, so this sits here, above both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from django.contrib import admin
from django.db.models import Q
from django.http import HttpRequest
from django.urls import reverse

import jobs
from console.admin import Subject, SubjectAction
from ingest.runs import subjects as run_subjects
from ingest.scraping.models import IngestionHandoff
from ingest.scraping.queueing import INGEST_REFERENCE
from tenancy.scoping import scope_queryset

HANDOFF_JOBS = [INGEST_REFERENCE, "ingest.SettleHandoff"]
VIEW_HANDOFFS = "ingest.view_ingestionhandoff"


def _named(job: jobs.Job) -> tuple[str, int | None]:
    """("handoff", id) or ("run", id): what the job's payload names."""
    payload: Any = job.payload if isinstance(job.payload, dict) else {}
    if job.type == INGEST_REFERENCE:
        value = payload.get("handoff")
        return "handoff", value if isinstance(value, int) else None
    event = payload.get("payload")
    value = event.get("run") if isinstance(event, dict) else None
    return "run", value if isinstance(value, int) else None


def handoff_subjects(request: HttpRequest, found: Sequence[jobs.Job], detail: bool) -> Mapping[int, Subject]:
    named = [(job, *_named(job)) for job in found]
    handoffs = {
        kind: {pk for _, k, pk in named if k == kind and pk is not None} for kind in ("handoff", "run")
    }
    if not handoffs["handoff"] and not handoffs["run"]:
        return {}
    rows = scope_queryset(IngestionHandoff.objects.select_related("reference"), request.user).filter(
        Q(pk__in=handoffs["handoff"]) | Q(ingest_run__in=handoffs["run"])
    )
    by_id: dict[int, IngestionHandoff] = {}
    by_run: dict[int, IngestionHandoff] = {}
    for handoff in rows:
        by_id[handoff.pk] = handoff
        if handoff.ingest_run_id is not None:
            by_run.setdefault(handoff.ingest_run_id, handoff)
    may_retry = detail and admin.site.get_model_admin(IngestionHandoff).has_operate_permission(request)  # type: ignore[attr-defined]
    subjects = {}
    for job, kind, pk in named:
        found_handoff = (by_id if kind == "handoff" else by_run).get(pk or 0)
        if found_handoff is None or found_handoff.tenant_id != job.tenant_id:
            continue
        subjects[job.pk] = _subject(job, found_handoff, may_retry)
    return subjects


def _subject(job: jobs.Job, handoff: IngestionHandoff, may_retry: bool) -> Subject:
    parts: tuple[tuple[str, str], ...] = ()
    if handoff.ingest_run_id is not None:
        parts = (
            (
                f"ingest run {handoff.ingest_run_id}",
                reverse("admin:ingest_ingestrun_change", args=[handoff.ingest_run_id]),
            ),
        )
    failed = handoff.status == IngestionHandoff.Status.FAILED
    return Subject(
        _label(handoff),
        _url(handoff),
        parts,
        message=f"{handoff.get_reason_code_display()}: {handoff.last_error}".rstrip(": ") if failed else "",
        actions=_retry(handoff) if failed and may_retry else (),
        replaces_retry="retrying this job alone would not reopen the handoff"
        if failed and job.state == "failed"
        else "",
    )


def _label(handoff: IngestionHandoff, word: str = "Handoff") -> str:
    return f"{word} {handoff.pk} ({handoff.reference.external_id})"


def _url(handoff: IngestionHandoff) -> str:
    return reverse("admin:ingest_ingestionhandoff_change", args=[handoff.pk])


def _retry(handoff: IngestionHandoff) -> tuple[SubjectAction, ...]:
    # The handoff page's own button: it retries and reports on the handoff's page.
    return (
        SubjectAction(
            "Retry the handoff", reverse("admin:ingest_ingestionhandoff_operate", args=[handoff.pk, "retry"])
        ),
    )


def run_and_handoff_subjects(
    request: HttpRequest, found: Sequence[jobs.Job], detail: bool
) -> Mapping[int, Subject]:
    """The run's subject of each job; for a run that is a handoff's ingestion (and a
    user who may see handoffs), the handoff too: one query for the runs, one for their
    handoffs."""
    runs = run_subjects.runs_of(request, found)
    by_run: dict[int, IngestionHandoff] = {}
    of_references = {run.pk for run in runs.values() if run.reference_id is not None}
    if of_references and request.user.has_perm(VIEW_HANDOFFS):
        rows = scope_queryset(IngestionHandoff.objects.select_related("reference"), request.user)
        for row in rows.filter(ingest_run__in=of_references).order_by("-id"):
            by_run.setdefault(row.ingest_run_id or 0, row)
    may_retry = (
        detail
        and bool(by_run)
        and admin.site.get_model_admin(IngestionHandoff).has_operate_permission(request)  # type: ignore[attr-defined]
    )
    hooks_failed = set() if detail else run_subjects.hooks_failed_of(found, runs.values())
    subjects = {}
    for job in found:
        run = runs.get(job.pk)
        if run is None:
            continue
        subject = run_subjects.run_subject(request, job, run, detail, hooks_failed)
        handoff = by_run.get(run.pk)
        if handoff is not None and handoff.tenant_id == job.tenant_id:
            subject = _with_handoff(subject, handoff, may_retry, detail)
        subjects[job.pk] = subject
    return subjects


def _with_handoff(subject: Subject, handoff: IngestionHandoff, may_retry: bool, detail: bool) -> Subject:
    """The run's subject, the handoff added: its link and, on the job's page, its state
    under the run's message and its retry after the run's actions."""
    parts = (*subject.parts, (_label(handoff, "handoff"), _url(handoff)))
    if not detail:
        return replace(subject, parts=parts)
    failed = handoff.status == IngestionHandoff.Status.FAILED
    said = f"{_label(handoff)} {handoff.get_status_display()}: {handoff.get_reason_code_display()}"
    return replace(
        subject,
        parts=parts,
        message="\n".join(filter(None, [subject.message, said])),
        actions=(*subject.actions, *(_retry(handoff) if failed and may_retry else ())),
    )
