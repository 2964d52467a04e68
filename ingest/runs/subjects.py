"""What the run pipeline's jobs work for: their ingest run (and batch), for the job
pages and the failure groups (``console.admin.register_job_subject``).

Every job a run queues carries the run's pipeline, so a list of jobs finds its runs in
one query by pipeline; a job's page adds the batch, the failed hook's own words and the
run page's actions."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence, Set
from typing import Any

from django.contrib import admin
from django.db.models import Q
from django.http import HttpRequest
from django.urls import reverse

import jobs
from console.admin import Subject, SubjectAction
from ingest.runs import services, timeline
from ingest.runs.admin import OPERATIONS, operation_url
from ingest.runs.models import BatchStatus, HookExecution, IngestBatch, IngestRun
from tenancy.scoping import scope_queryset

RUN_JOBS = ["ingest.RunIngester", "ingest.RunHooks", "ingest.PublishBatch", services.STOP_HOOKS]
VIEW_RUNS = "ingest.view_ingestrun"


def _event(job: jobs.Job) -> dict[str, Any]:
    """The run's event a delivery carries, or the job's own payload (StopHooks)."""
    event = job.payload.get("payload") if isinstance(job.payload, dict) else None
    return event if isinstance(event, dict) else (job.payload if isinstance(job.payload, dict) else {})


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_subjects(request: HttpRequest, found: Sequence[jobs.Job], detail: bool) -> Mapping[int, Subject]:
    runs = runs_of(request, found)
    hooks_failed = set() if detail else hooks_failed_of(found, runs.values())
    return {
        job.pk: run_subject(request, job, run, detail, hooks_failed)
        for job in found
        if (run := runs.get(job.pk))
    }


def runs_of(request: HttpRequest, found: Sequence[jobs.Job]) -> dict[int, IngestRun]:
    """Job id → the run it works for, of the job's tenant and visible to the user: one
    query for the whole list."""
    pipelines = {job.pipeline_id for job in found}
    named = {pk for job in found if (pk := _int(_event(job).get("run"))) is not None}
    runs = list(
        scope_queryset(IngestRun.objects.select_related("source", "tenant"), request.user).filter(
            Q(pipeline__in=pipelines) | Q(pk__in=named)
        )
    )
    by_pipeline = {run.pipeline: run for run in runs}
    by_id = {run.pk: run for run in runs}
    matched = {}
    for job in found:
        run = by_pipeline.get(job.pipeline_id) or by_id.get(_int(_event(job).get("run")) or 0)
        if run is not None and run.tenant_id == job.tenant_id:
            matched[job.pk] = run
    return matched


def run_subject(
    request: HttpRequest,
    job: jobs.Job,
    run: IngestRun,
    detail: bool,
    hooks_failed: Set[tuple[int, int]] = frozenset(),
) -> Subject:
    """The run (and batch) as a list shows it, ``hooks_failed`` from
    :func:`hooks_failed_of` for the whole list; with ``detail``, as the job's page does."""
    return _detail(request, job, run) if detail else _brief(job, run, hooks_failed)


def hooks_failed_of(found: Sequence[jobs.Job], runs: Collection[IngestRun]) -> set[tuple[int, int]]:
    """``(batch, run)`` of the batches whose hooks failed, of those the failed jobs name:
    one query for the whole list."""
    named = {
        pk for job in found if job.state == "failed" and (pk := _int(_event(job).get("batch"))) is not None
    }
    if not named or not runs:
        return set()
    return set(
        IngestBatch.objects.filter(pk__in=named, run__in=runs, status=BatchStatus.HOOKS_FAILED).values_list(
            "pk", "run_id"
        )
    )


def _replaces(job: jobs.Job, run: IngestRun, hooks_failed: bool) -> str:
    """Why retrying the failed job alone is not the fix, if it is not: the run's own
    retries are."""
    if job.state != "failed":  # the engine's Job.State.FAILED (pipelines read no engine module)
        return ""
    if run.finished:
        return "retrying this job alone would not reopen the run"
    if hooks_failed:
        return "retrying this job alone would not run the batch's hooks again"
    return ""


def _label(run: IngestRun) -> str:
    return f"Ingest run {run.pk} ({run.tenant.slug}/{run.source.name})"


def _url(run: IngestRun) -> str:
    return reverse("admin:ingest_ingestrun_change", args=[run.pk])


def _brief(job: jobs.Job, run: IngestRun, hooks_failed: Set[tuple[int, int]]) -> Subject:
    sequence = _int(_event(job).get("sequence"))
    parts = ((f"batch {sequence}", f"{_url(run)}#batch-{sequence}"),) if sequence else ()
    batch = _int(_event(job).get("batch"))
    return Subject(
        _label(run), _url(run), parts, replaces_retry=_replaces(job, run, (batch, run.pk) in hooks_failed)
    )


def _detail(request: HttpRequest, job: jobs.Job, run: IngestRun) -> Subject:
    batch = None
    batch_id = _int(_event(job).get("batch"))
    if batch_id is not None:
        batch = IngestBatch.objects.filter(pk=batch_id, run=run).first()
    parts = ((f"batch {batch.sequence}", f"{_url(run)}#batch-{batch.sequence}"),) if batch else ()
    message = ""
    failed_hook = None
    if batch is not None:
        failed_hook = (
            HookExecution.objects.filter(batch=batch, status=HookExecution.Status.FAILED)
            .order_by("position")
            .first()
        )
    if batch is not None and failed_hook is not None:
        said = services.hook_failure_text(failed_hook.reason, failed_hook.exit_code, failed_hook.log_tail)
        message = f"Hook {failed_hook.hook_name} on batch {batch.sequence} failed with {said}"
    elif run.failure_reason:
        message = f"The run failed: {run.failure_reason}"
    actions: tuple[SubjectAction, ...] = ()
    run_admin = admin.site.get_model_admin(IngestRun)
    if run_admin.has_operate_permission(request):  # type: ignore[attr-defined]
        batches = timeline.counts(run)["batches"]
        actions = tuple(
            SubjectAction(op.label, operation_url(op, run))
            for op in OPERATIONS.values()
            if op.name != "cancel" and op.allows(run, batches)
        )
    replaces = _replaces(job, run, batch is not None and batch.status == BatchStatus.HOOKS_FAILED)
    return Subject(_label(run), _url(run), parts, message, actions, replaces)
