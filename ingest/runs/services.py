"""What can be done to ingest runs, for the API, the admin, the commands and the handlers
alike: start a run, cancel it, retry its failed hooks or its failed batch, and the
pipeline's own steps that move a run to its end.

Every operator action is a ``RunAction`` row naming who did it and through what, written
in the transaction of the change itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q

import jobs
from ingest.runs import events, ingesters, sql
from ingest.runs.errors import SourceError
from ingest.runs.models import (
    BATCH_SEQUENCE_UNIQUE,
    LIVE_EXECUTIONS,
    ActionKind,
    BatchStatus,
    ExecutionStatus,
    HookExecution,
    IngestBatch,
    IngestRun,
    IngestSource,
    RunAction,
    RunStatus,
)
from intake import staging

STAGING_AREA = "ingest"
# Records written per INSERT when a batch is published.
PUBLISH_CHUNK = 2000


class RunRefused(Exception):
    """An action the run (or its source) does not allow now; the message says why."""

    def __init__(self, message: str, *, run: IngestRun | None = None) -> None:
        super().__init__(message)
        self.run = run


def batches_store(tenant: str) -> staging.Store:
    """Where the batches of ``tenant``'s runs (its slug) wait for their hooks: a folder of
    its own, so that storage credentials given to a tenant's hooks can be limited to it."""
    return staging.store(STAGING_AREA, tenant=tenant)


def _actor(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) else None


def record_action(
    run: IngestRun,
    kind: str,
    *,
    actor: Any = None,
    via: str = "pipeline",
    message: str = "",
    before: str | None = None,
) -> RunAction:
    """``kind`` done to ``run``; with ``before``, the status it had then, which moved it
    from that status to the one it has now."""
    moved = {} if before is None else {"from_status": before, "to_status": run.status}
    return RunAction.objects.create(
        run=run, kind=kind, actor=_actor(actor), via=via, message=message[:4000], at=jobs.now(), **moved
    )


# --- starting -------------------------------------------------------------------------------


@transaction.atomic
def start_ingest(
    source: IngestSource, *, actor: Any = None, via: str = "api", reference: Any = None, pipeline: Any = None
) -> IngestRun:
    """Open a run of ``source`` and ask for its first batch.

    Emits ``IngestRunStarted`` once (the fact, for audit and observers) and
    ``NextBatchRequested`` for batch 1. A source has at most one running run, and so has
    each scraped ``reference`` (a run of only that reference; partial unique indexes):
    starting another refuses with the running one attached. ``pipeline``: the engine
    pipeline the run's jobs join (the handoff's, for a reference), else a new one. A
    source whose config its ingester cannot use is refused, naming the problem: the
    admin, the API and the commands start runs here, and such a run could only fail.
    """
    try:  # before any lock: checking an http_json URL may resolve its host
        ingesters.usable_config(source.kind, source.config, tenant=source.tenant.slug)
    except SourceError as exc:
        raise RunRefused(f"source {source.name!r} cannot run: {exc}") from None
    if reference is None:
        source = IngestSource.objects.select_for_update().get(pk=source.pk)
        running = source.runs.filter(status=RunStatus.RUNNING, reference=None).first()
        what = f"source {source.name!r}"
    else:  # the caller holds the reference's row; runs of other references go on
        source = IngestSource.objects.get(pk=source.pk)
        running = IngestRun.objects.filter(reference=reference, status=RunStatus.RUNNING).first()
        what = f"reference {reference.external_id!r} of source {source.name!r}"
    if not source.enabled:
        raise RunRefused(f"source {source.name!r} is disabled")
    if running is not None:
        raise RunRefused(f"{what} already has run {running.pk} running", run=running)
    try:
        with transaction.atomic():
            run = IngestRun.objects.create(
                tenant_id=source.tenant_id,
                source=source,
                started_by=_actor(actor),
                max_failures=source.max_failures,
                started_at=jobs.now(),
                reference=reference,
                **({} if pipeline is None else {"pipeline": pipeline}),
            )
    except IntegrityError:  # a concurrent start won the partial unique index
        running = IngestRun.objects.filter(
            source=source, reference=reference, status=RunStatus.RUNNING
        ).first()
        raise RunRefused(f"{what} already has a run running", run=running) from None
    record_action(run, ActionKind.STARTED, actor=actor, via=via, before="")
    user = _actor(actor)
    events.publish_run_started(run, started_by=user.get_username() if user else "")
    events.publish_next_batch(run, sequence=1)
    return run


# --- the pipeline's steps -------------------------------------------------------------------


def stage_records(records: list[dict[str, Any]], max_bytes: int, *, tenant: str) -> str:
    """Write a batch's records as JSON Lines to ``tenant``'s staging folder; its staged id.
    ``jobs.InvalidPayload`` names the first record PostgreSQL could not store (a lone
    surrogate, a NUL character, NaN), before anything is staged."""
    lines = [
        jobs.storable_json(record, f"record {position}").encode() + b"\n"
        for position, record in enumerate(records, 1)
    ]
    store = batches_store(tenant)
    with store.stage(max_bytes=max_bytes) as pending:
        pending.write(b"".join(lines))
        pending.keep()
    return pending.id


def staged_lines(staged_id: str, *, tenant: str) -> Iterator[str]:
    """A staged batch's records, each its line of JSON text."""
    with batches_store(tenant).open(staged_id) as handle:
        for line in handle:
            if line.strip():
                yield line.decode()


def record_batch(
    run: IngestRun, *, sequence: int, fetched: Any, session_in: dict[str, Any], staged_id: str, fetch_ms: int
) -> IngestBatch | None:
    """Write batch ``sequence`` with its hook executions (the source's hooks now: changing
    them later does not change what an earlier batch was checked by), and emit what
    follows it, in the caller's transaction: ``IngesterBatchReady``, and
    ``NextBatchRequested`` when the source has more. None (and nothing written) if the run
    stopped or the batch exists already; an attempt that races another to the same batch
    fails on the batch's unique constraint instead (``is_duplicate_batch``)."""
    batch = sql.record_batch(
        run=run.pk,
        sequence=sequence,
        records=len(fetched.records),
        session_in=session_in,
        session_out=fetched.session,
        has_more=fetched.has_more,
        location=staged_id,
        fetch_ms=fetch_ms,
        now=jobs.now(),
    )
    if batch is None:
        return None
    batch.run = run
    events.publish_batch_ready(batch)
    if fetched.has_more:
        events.publish_next_batch(run, sequence=sequence + 1)
    return batch


def is_duplicate_batch(error: IntegrityError) -> bool:
    """Whether ``error`` is a second insert of a run's batch (its unique constraint)."""
    diagnostics = getattr(error.__cause__, "diag", None)
    return getattr(diagnostics, "constraint_name", None) == BATCH_SEQUENCE_UNIQUE


class Published(NamedTuple):
    sequence: int
    records: int | None  # None: nothing was done (published already, or the run ended)


def publish_batch(
    batch_id: int, *, run: int, tenant: int | None, current_job: int | None = None
) -> Published:
    """Make a checked batch's records visible: its rows and its ``published`` mark in
    the caller's transaction, so readers see all of it or none. The batch is looked up
    within ``run`` and ``tenant`` (``IngestBatch.DoesNotExist`` otherwise) and locked
    with its run in the same query."""
    batch = sql.batch_to_publish(batch=batch_id, run=run, tenant=tenant)
    if batch is None:
        raise IngestBatch.DoesNotExist(f"batch {batch_id} of run {run} (tenant {tenant})")
    ingest_run = batch.run
    if batch.status == BatchStatus.PUBLISHED or ingest_run.finished:
        return Published(batch.sequence, None)
    key_field = ingest_run.source.config.get("key_field") or ""
    count = 0
    keys: list[str] = []
    data: list[str] = []
    slug = ingest_run.tenant.slug
    for line in staged_lines(batch.location, tenant=slug):
        # The line goes to PostgreSQL as it was staged; it is read here only for its key.
        keys.append(str(json.loads(line).get(key_field, ""))[:255] if key_field else "")
        data.append(line)
        if len(keys) >= PUBLISH_CHUNK:
            sql.insert_records(source=ingest_run.source_id, batch=batch.pk, first=count, keys=keys, data=data)
            count += len(keys)
            keys, data = [], []
    if keys:
        sql.insert_records(source=ingest_run.source_id, batch=batch.pk, first=count, keys=keys, data=data)
        count += len(keys)
    sql.mark_published(batch=batch.pk, count=count, now=jobs.now())
    if ingest_run.ingest_done:
        settle(ingest_run, current_job=current_job)
    staged = batch.location
    transaction.on_commit(lambda: batches_store(slug).delete(staged))
    return Published(batch.sequence, count)


def settle(run: IngestRun, *, current_job: int | None = None) -> IngestRun:
    """Finish ``run`` if nothing is left to do: the source is exhausted and every batch is
    published (succeeded) or failed its hooks (failed). In the caller's transaction."""
    run = IngestRun.objects.select_for_update(no_key=True).get(pk=run.pk)
    if run.finished or not run.ingest_done:
        return run
    counts = run.batches.aggregate(
        open=_count(~Q(status__in=[BatchStatus.PUBLISHED, BatchStatus.HOOKS_FAILED])),
        failed=_count(Q(status=BatchStatus.HOOKS_FAILED)),
    )
    if counts["open"]:
        return run
    if counts["failed"]:
        return fail_run(
            run,
            f"{counts['failed']} of {run.batches_ingested} batches failed their hooks",
            current_job=current_job,
        )
    run = _finish(run, RunStatus.SUCCEEDED, kind=ActionKind.SUCCEEDED)
    if run_executions(run).filter(tries__gt=0).exists():  # a run without hooks has none
        _stop_hooks(run)
    events.publish_run_finished(run)
    return run


def record_hook_failure(
    execution: HookExecution,
    *,
    reason: str,
    exit_code: int | None = None,
    log_tail: str = "",
    pod_phase: str = "",
    current_job: int | None = None,
) -> IngestRun:
    """A hook failed its batch: keep why on the execution, count it on the run, and end
    the run when its failures reach ``max_failures`` (or nothing else is left)."""
    run = _fail_execution(
        execution, reason, exit_code=exit_code, log_tail=log_tail, pod_phase=pod_phase or execution.pod_phase
    )
    if run.finished:
        return run
    run.refresh_from_db()
    if run.hook_failures >= run.max_failures:
        failures = f"{run.hook_failures} hook failure{'' if run.hook_failures == 1 else 's'}"
        return fail_run(
            run,
            f"{failures} reached the run's limit of "
            f"{run.max_failures}; the last: {execution.hook_name} on batch "
            f"{execution.batch.sequence}: {hook_failure_text(reason, exit_code, log_tail)}",
            current_job=current_job,
        )
    return settle(run, current_job=current_job)


def hook_failure_text(reason: str, exit_code: int | None, log_tail: str = "") -> str:
    """Why a hook failed, in the words an operator acts on: the exit code (with the
    runner's reason beside it unless it is the container's bare ``Error``), then the last
    line the hook wrote, which is where a check says what it found."""
    if exit_code is None:
        head = reason or "failed"
    else:
        head = f"exit code {exit_code}" + (f" ({reason})" if reason not in ("", "Error") else "")
    said = last_line(log_tail)
    return f"{head}: {said}" if said else head


def last_line(text: str, limit: int = 300) -> str:
    """The last non-blank line of ``text``, stripped and cut to ``limit`` characters."""
    for line in reversed(text.splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _fail_execution(execution: HookExecution, reason: str, **fields: Any) -> IngestRun:
    """Mark the execution and its batch failed; its run, locked, with the failure counted
    unless the run had already ended (then returned as it is, finished). The batch's
    hooks after it will not run: they are settled as cancelled, saying why."""
    now = jobs.now()
    HookExecution.objects.filter(pk=execution.pk).update(
        status=ExecutionStatus.FAILED, reason=reason[:4000], finished_at=now, **fields
    )
    _settle_executions(
        HookExecution.objects.filter(batch=execution.batch_id),
        f"not run: hook {execution.hook_name} failed on this batch",
        now,
    )
    IngestBatch.objects.filter(pk=execution.batch_id).update(status=BatchStatus.HOOKS_FAILED, checked_at=now)
    run = IngestRun.objects.select_for_update(no_key=True).get(batches=execution.batch_id)
    if not run.finished:
        IngestRun.objects.filter(pk=run.pk).update(hook_failures=F("hook_failures") + 1)
    return run


def refuse_hook(execution: HookExecution, *, reason: str, current_job: int | None = None) -> IngestRun:
    """A hook may not run (its catalogue entry is disabled, withdrawn from the tenant, or
    no longer fits the hook's values): the execution and its batch fail with ``reason``,
    and so does the run, at once: its other batches would meet the same refusal. In the
    caller's transaction."""
    run = _fail_execution(execution, reason)
    if run.finished:
        return run
    return fail_run(run, f"{reason} (batch {execution.batch.sequence})", current_job=current_job)


def fail_run(
    run: IngestRun, reason: str, *, actor: Any = None, via: str = "pipeline", current_job: int | None = None
) -> IngestRun:
    """Mark ``run`` failed and cancel its outstanding deliveries (each cancellation is
    recorded on its job; nothing is deleted), and remove what it still has on the hook
    runner. In the caller's transaction."""
    run = _finish(run, RunStatus.FAILED, kind=ActionKind.FAILED, reason=reason, actor=actor, via=via)
    cancel_outstanding(run, actor=actor, via=via, reason=f"run {run.pk} failed", skip=current_job)
    _stop_hooks(run, actor=actor)
    events.publish_run_finished(run)  # after the cancellations, which would take it too
    return run


def cancel_outstanding(
    run: IngestRun, *, actor: Any, reason: str, skip: int | None = None, via: str = ""
) -> int:
    cancelled = 0
    for job in outstanding_jobs(run):
        if job.pk != skip:
            jobs.cancel(job, actor=actor, reason=reason, via=via)
            cancelled += 1
    return cancelled


def outstanding_jobs(run: IngestRun) -> Iterable[jobs.Job]:
    return [job for job in jobs.pipeline_jobs(run.pipeline) if job.state in ("pending", "running")]


def _finish(
    run: IngestRun, status: str, *, kind: str, reason: str = "", actor: Any = None, via: str = "pipeline"
) -> IngestRun:
    """End ``run`` with ``status``, and its hook executions with it: none may launch or
    wait for room once the run has ended (the launch window counts the ones that do)."""
    now, before = jobs.now(), run.status
    IngestRun.objects.filter(pk=run.pk).update(status=status, failure_reason=reason[:4000], finished_at=now)
    run.refresh_from_db()
    _settle_executions(run_executions(run), f"ended with run {run.pk} ({status})", now)
    record_action(run, kind, actor=actor, via=via, message=reason, before=before)
    return run


def run_executions(run: IngestRun) -> Any:
    return HookExecution.objects.filter(batch__run=run.pk)


def _settle_executions(executions: Any, reason: str, now: Any) -> int:
    """Executions of ``executions`` that could still launch or run are cancelled with
    ``reason``: a retry gives each a new try (a new Job name), never this one's."""
    return executions.filter(status__in=LIVE_EXECUTIONS).update(
        status=ExecutionStatus.CANCELLED, reason=reason[:4000], finished_at=now, scheduled=False
    )


# The handler that removes a run's hooks from the runner.
STOP_HOOKS = "ingest.StopHooks"


def _stop_hooks(run: IngestRun, *, actor: Any = None) -> None:
    """Queue the removal of the ended ``run``'s Jobs (and their Pods) from the hook runner,
    however it ended, as a workflow engine collects its pods: a failed or cancelled run's
    Jobs would otherwise hold the cluster's room, and run on, until their deadline, and a
    finished Job keeps nothing the run has not stored (its exit code and log tail)."""
    jobs.enqueue(
        STOP_HOOKS, {"run": run.pk}, tenant=run.tenant_id, pipeline=run.pipeline, created_by=_actor(actor)
    )


def _count(condition: Q) -> Count:
    return Count("id", filter=condition)


# --- operator actions -----------------------------------------------------------------------


@transaction.atomic
def cancel_run(run: IngestRun, *, actor: Any = None, via: str = "admin", reason: str = "") -> IngestRun:
    """Stop a running run: its outstanding deliveries are cancelled (recorded with the
    actor), and a job removes whatever hooks it still has on the runner."""
    run = IngestRun.objects.select_for_update(no_key=True).get(pk=run.pk)
    if run.finished:
        raise RunRefused(f"run {run.pk} is already {run.status}", run=run)
    run = _finish(
        run,
        RunStatus.CANCELLED,
        kind=ActionKind.CANCELLED,
        reason=reason or "cancelled",
        actor=actor,
        via=via,
    )
    cancel_outstanding(run, actor=actor, via=via, reason=f"run {run.pk} cancelled")
    _stop_hooks(run, actor=actor)
    events.publish_run_finished(run)  # after the cancellations, which would take it too
    return run


def _reopen(run: IngestRun, *, except_batches: Iterable[int] = ()) -> None:
    """Set a finished run running again, and deliver again what its end cancelled: the
    hooks of batches not yet checked (each hook its run's end settled gets a new try),
    the publication of batches checked.

    Refused while the removal of the run's hooks from the runner is still to do: it
    removes whatever carries the run's label, so it would take the new tries' Jobs too.
    """
    stopping = [job for job in outstanding_jobs(run) if job.type == STOP_HOOKS]
    if stopping:
        raise RunRefused(
            f"run {run.pk}'s hooks are still being removed from the runner "
            f"(job {stopping[0].pk}, {stopping[0].state}); retry once it has "
            "finished",
            run=run,
        )
    IngestRun.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, finished_at=None, failure_reason="", hook_failures=0
    )
    run.refresh_from_db()
    for batch in run.batches.exclude(pk__in=list(except_batches)).order_by("sequence"):
        if batch.status in (BatchStatus.FETCHED, BatchStatus.CHECKING):
            _rewind(batch)
            events.publish_batch_ready(batch)
        elif batch.status == BatchStatus.CHECKED:
            events.publish_hooks_completed(batch)


def _rewind(batch: IngestBatch) -> None:
    """The batch's failed and cancelled executions wait to run again. Each keeps its
    count of tries, so its next launch is a new try under a new name
    (``conveyor-hook-<execution>-<try>``): a Job left from an earlier try, with the spec
    of its day, is never adopted for it."""
    batch.hook_executions.filter(status__in=[ExecutionStatus.FAILED, ExecutionStatus.CANCELLED]).update(
        status=ExecutionStatus.WAITING,
        reason="",
        exit_code=None,
        log_tail="",
        finished_at=None,
        scheduled=False,
        pod_phase="",
    )


@transaction.atomic
def retry_failed_hooks(run: IngestRun, *, actor: Any = None, via: str = "admin") -> int:
    """Run the hooks again on every batch whose hooks failed, reopening the run if it
    had failed (its hook-failure count starts again). How many batches."""
    run = IngestRun.objects.select_for_update(no_key=True).get(pk=run.pk)
    failed = list(run.batches.filter(status=BatchStatus.HOOKS_FAILED).order_by("sequence"))
    if not failed:
        raise RunRefused(f"run {run.pk} has no batch whose hooks failed", run=run)
    if run.status == RunStatus.CANCELLED:
        raise RunRefused(f"run {run.pk} was cancelled; start a new run", run=run)
    _claim_source(run)
    before = run.status
    if run.finished:
        _reopen(run, except_batches=[batch.pk for batch in failed])
    for batch in failed:
        _rewind(batch)
        IngestBatch.objects.filter(pk=batch.pk).update(status=BatchStatus.FETCHED, checked_at=None)
        events.publish_batch_ready(batch)
    record_action(
        run,
        ActionKind.RETRIED_HOOKS,
        actor=actor,
        via=via,
        message="batches " + ", ".join(str(b.sequence) for b in failed),
        before=before,
    )
    return len(failed)


@transaction.atomic
def retry_from_failed_batch(run: IngestRun, *, actor: Any = None, via: str = "admin") -> int:
    """Fetch again from the batch the ingester failed on (the one after the last batch
    fetched), with the session the last batch left, reopening the run. The batch number."""
    run = IngestRun.objects.select_for_update(no_key=True).get(pk=run.pk)
    if run.status != RunStatus.FAILED or run.ingest_done:
        raise RunRefused(f"run {run.pk} did not fail while fetching; nothing to fetch again", run=run)
    _claim_source(run)
    before = run.status
    _reopen(run)
    sequence = run.batches_ingested + 1
    events.publish_next_batch(run, sequence=sequence)
    record_action(
        run, ActionKind.RETRIED_FROM_BATCH, actor=actor, via=via, message=f"batch {sequence}", before=before
    )
    return sequence


def _claim_source(run: IngestRun) -> None:
    """Refuse to reopen ``run`` while another run holds its place: of the whole source, or
    of the same reference."""
    running = IngestRun.objects.filter(status=RunStatus.RUNNING).exclude(pk=run.pk)
    if run.reference_id is None:
        other = running.filter(source_id=run.source_id, reference=None).first()
        what = f"source {run.source.name!r}"
    else:
        other = running.filter(reference_id=run.reference_id).first()
        what = f"reference {run.reference_id} of source {run.source.name!r}"
    if other is not None:
        raise RunRefused(
            f"{what} has run {other.pk} running; a run can be reopened only when no other is", run=other
        )


# --- the safety net ---------------------------------------------------------------------------

# A run younger than this is never called stalled: its first delivery may not be
# committed by the time a sweep reads it.
STALL_GRACE_SECONDS = 60


def fail_stalled_runs() -> list[int]:
    """Fail every running run whose pipeline has no pending or running job: nothing
    will move it any more. The reason names the last job that failed and its message,
    without the traceback the worker keeps for an unexpected exception: a run's reason is
    read by its tenant's members, and the job keeps the frames for the staff."""
    cutoff = jobs.now() - timedelta(seconds=STALL_GRACE_SECONDS)
    candidates = list(
        IngestRun.objects.filter(status=RunStatus.RUNNING, started_at__lt=cutoff).values_list(
            "pk", "pipeline"
        )
    )
    busy = jobs.busy_pipelines(pipeline for _, pipeline in candidates)
    failed = []
    for pk, pipeline in candidates:
        if pipeline in busy:
            continue
        with transaction.atomic():
            run = IngestRun.objects.select_for_update(no_key=True).get(pk=pk)
            if run.finished or jobs.busy_pipelines([run.pipeline]):
                continue
            last = [job for job in jobs.pipeline_jobs(run.pipeline) if job.state == "failed"]
            why = (
                f"; the last failure: {last[-1].type} #{last[-1].pk}: "
                f"{jobs.without_traceback(last[-1].last_error)}"
                if last
                else ""
            )
            fail_run(run, f"stalled: nothing of the run is queued or running{why}")
            failed.append(pk)
    return failed
