"""The run pipeline's handlers, each the only listener of its event:

    NextBatchRequested  → ingest.RunIngester  (one batch from the source, then the next request)
    IngesterBatchReady  → ingest.RunHooks     (the batch's hooks, local or on Kubernetes)
    HookBatchCompleted  → ingest.PublishBatch (the batch's records visible in one step)

plus ``ingest.StopHooks``, queued in the transaction that ends a run (cancelled,
failed, or succeeded after a try was given up on), which removes what the run still has
on the hook runner: its Jobs, their Pods with them.

A delivery's payload names the run (and batch); each handler loads them through its
job's tenant and does nothing for a run that has ended. Batches are fetched one after
the other: the request for batch n+1 is written with batch n, so one ingester runs at a
time per run, reading the session batch n left.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from django.db import IntegrityError

import jobs
from ingest import conf
from ingest.runs import events, hooks, ingesters, runners, services, sql
from ingest.runs.errors import InfrastructureError, SourceError
from ingest.runs.models import IngestBatch, IngestRun
from intake import staging

# Sources are cheap to ask again: a short backoff. Hooks wait on a cluster that may be
# full: 60 s × 2^n up to 5 min between attempts.
INGESTER_BACKOFF = jobs.Exponential(base=10, cap=300, jitter=0.1)
HOOKS_BACKOFF = jobs.Exponential(base=60, cap=300)
HOOKS_ATTEMPTS = 6


def _event(ctx: jobs.JobContext) -> dict[str, Any]:
    event = ctx.payload.get("payload")
    if not isinstance(event, dict) or not isinstance(event.get("run"), int):
        raise jobs.PermanentError("the delivery names no run")
    return event


def _run(ctx: jobs.JobContext, event: dict[str, Any], sequence: int) -> IngestRun:
    """The event's run with its source, through the job's tenant, with ``batch_fetched``
    and ``previous_session`` for batch ``sequence`` (``sql.run_for_fetch``)."""
    run = sql.run_for_fetch(run=event["run"], tenant=ctx.tenant_id, sequence=sequence)
    if run is None:
        raise jobs.PermanentError(f"run {event['run']} is not one of this job's tenant's")
    return run


def _batch_id(event: dict[str, Any]) -> int:
    if not isinstance(event.get("batch"), int):
        raise jobs.PermanentError("the delivery names no batch")
    return event["batch"]


def _no_such_batch(event: dict[str, Any]) -> jobs.PermanentError:
    return jobs.PermanentError(
        f"batch {event['batch']} is not one of run {event['run']}'s, or the run is not this job's tenant's"
    )


@jobs.handler(
    "ingest.RunIngester",
    subscribes=[events.NEXT_BATCH_REQUESTED],
    atomic=False,
    max_attempts=5,
    backoff=INGESTER_BACKOFF,
)
def run_ingester(ctx: jobs.JobContext) -> dict[str, Any]:
    event = _event(ctx)
    sequence = event.get("sequence")
    if not isinstance(sequence, int) or sequence < 1:
        raise jobs.PermanentError(f"sequence {sequence!r} is not a batch number")
    run = _run(ctx, event, sequence)
    if run.finished:
        return {"skipped": f"run {run.status}"}
    if run.batch_fetched:  # an earlier attempt wrote it
        return {"batch": sequence, "already": "fetched"}
    session = run.first_session() if sequence == 1 else run.previous_session
    if session is None:
        return _ingester_failed(ctx, run, sequence, f"batch {sequence - 1} is missing")
    source = run.source
    try:
        ingester = ingesters.get(source.kind)
    except KeyError:
        return _ingester_failed(ctx, run, sequence, f"no ingester of kind {source.kind!r}")
    started = time.perf_counter()
    try:
        config = ingesters.usable_config(source.kind, source.config, tenant=run.tenant.slug)
        fetched = ingester.fetch(config, session, source.batch_size, tenant=run.tenant.slug)
    except SourceError as exc:
        if exc.transient and ctx.attempt < ctx.job.max_attempts:
            raise jobs.TransientError(f"batch {sequence}: {exc}") from exc
        return _ingester_failed(ctx, run, sequence, str(exc))
    fetch_ms = round((time.perf_counter() - started) * 1000)
    try:
        staged_id = services.stage_records(
            fetched.records, int(conf.get("MAX_BATCH_BYTES")), tenant=run.tenant.slug
        )
    except (staging.StagedTooLarge, jobs.InvalidPayload, OSError) as exc:
        if isinstance(exc, OSError) and ctx.attempt < ctx.job.max_attempts:
            raise jobs.TransientError(f"batch {sequence}: cannot stage its records: {exc}") from exc
        return _ingester_failed(ctx, run, sequence, f"cannot stage its records: {exc}")
    try:
        with ctx.batch():
            batch = services.record_batch(
                run,
                sequence=sequence,
                fetched=fetched,
                session_in=session,
                staged_id=staged_id,
                fetch_ms=fetch_ms,
            )
    except IntegrityError as exc:
        if not services.is_duplicate_batch(exc):
            raise
        batch = None  # a concurrent attempt wrote it first
    if batch is None:
        services.batches_store(run.tenant.slug).delete(staged_id)
        return {"batch": sequence, "already": "fetched, or the run ended"}
    ctx.progress(sequence, None, f"batch {sequence}: {batch.records} records")
    return {"batch": sequence, "records": batch.records, "has_more": batch.has_more}


def _ingester_failed(ctx: jobs.JobContext, run: IngestRun, sequence: int, message: str) -> NoReturn:
    with ctx.batch():
        services.fail_run(run, f"fetching batch {sequence} failed: {message}", current_job=ctx.job.pk)
    raise jobs.PermanentError(f"batch {sequence}: {message}")


@jobs.handler(
    "ingest.RunHooks",
    subscribes=[events.INGESTER_BATCH_READY],
    atomic=False,
    max_attempts=HOOKS_ATTEMPTS,
    backoff=HOOKS_BACKOFF,
)
def run_hooks(ctx: jobs.JobContext) -> dict[str, Any]:
    event = _event(ctx)
    batch, executions = sql.batch_with_hooks(batch=_batch_id(event), run=event["run"], tenant=ctx.tenant_id)
    if batch is None:
        raise _no_such_batch(event)
    run = batch.run
    if run.finished:
        return {"skipped": f"run {run.status}"}
    if batch.status in (IngestBatch.Status.CHECKED, IngestBatch.Status.PUBLISHED):
        return {"batch": batch.sequence, "already": batch.status}
    if batch.status == IngestBatch.Status.HOOKS_FAILED:
        return {"batch": batch.sequence, "already": batch.status}
    hooks.check_batch(ctx, batch, executions, runners.current())
    return {"batch": batch.sequence, "hooks": "passed"}


@jobs.handler(
    "ingest.PublishBatch", subscribes=[events.HOOK_BATCH_COMPLETED], max_attempts=5, backoff=INGESTER_BACKOFF
)
def publish_batch(ctx: jobs.JobContext) -> dict[str, Any]:
    event = _event(ctx)
    try:
        published = services.publish_batch(
            _batch_id(event), run=event["run"], tenant=ctx.tenant_id, current_job=ctx.job.pk
        )
    except IngestBatch.DoesNotExist:
        raise _no_such_batch(event) from None
    except staging.NotStaged as exc:
        # Nothing can bring the records back; the run is failed by ``ReconcileRuns``.
        raise jobs.PermanentError(f"batch {event.get('sequence')}: {exc}") from exc
    if published.records is None:
        return {"batch": published.sequence, "skipped": "published already, or the run ended"}
    return {"batch": published.sequence, "records": published.records}


@jobs.handler(services.STOP_HOOKS, max_attempts=8, backoff=HOOKS_BACKOFF)
def stop_hooks(ctx: jobs.JobContext) -> dict[str, Any]:
    """Remove every hook labelled with the ended run. The run is not reopened while
    this job is to do (``services._reopen``), so nothing it removes is a new try's."""
    run_id = ctx.payload.get("run")
    run = None
    if isinstance(run_id, int) and ctx.tenant_id is not None:
        run = IngestRun.objects.filter(pk=run_id, tenant_id=ctx.tenant_id).first()
    if run is None:
        raise jobs.PermanentError("the job names no run of its tenant")
    try:
        removed = runners.current().stop_labelled({"conveyor.io/run": str(run.pk)})
    except InfrastructureError as exc:
        raise jobs.TransientError(str(exc)) from exc
    return {"removed": removed}
