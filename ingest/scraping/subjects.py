"""What a handoff's jobs work for: the handoff (``console.admin.register_job_subject``).

``ingest.IngestReference`` names its handoff; ``ingest.SettleHandoff`` names the run
whose outcome it settles, and the handoff points at that run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib import admin
from django.db.models import Q
from django.http import HttpRequest
from django.urls import reverse

import jobs
from console.admin import Subject, SubjectAction
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
    url = reverse("admin:ingest_ingestionhandoff_change", args=[handoff.pk])
    parts: tuple[tuple[str, str], ...] = ()
    if handoff.ingest_run_id is not None:
        parts = (
            (
                f"ingest run {handoff.ingest_run_id}",
                reverse("admin:ingest_ingestrun_change", args=[handoff.ingest_run_id]),
            ),
        )
    failed = handoff.status == IngestionHandoff.Status.FAILED
    actions: tuple[SubjectAction, ...] = ()
    if failed and may_retry:
        # The list's action, on this one handoff: it retries in one transaction and
        # reports on the list.
        actions = (
            SubjectAction(
                "Retry the handoff",
                reverse("admin:ingest_ingestionhandoff_changelist"),
                {"action": "retry_handoffs", "_selected_action": str(handoff.pk), "index": "0"},
            ),
        )
    return Subject(
        f"Handoff {handoff.pk} ({handoff.reference.external_id})",
        url,
        parts,
        message=f"{handoff.get_reason_code_display()}: {handoff.last_error}".rstrip(": ") if failed else "",
        actions=actions,
        replaces_retry="retrying this job alone would not reopen the handoff"
        if failed and job.state == "failed"
        else "",
    )
