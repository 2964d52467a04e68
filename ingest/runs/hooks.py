"""Running a batch's hooks, one after the other, as a state machine kept in the database.

Each hook over a batch is a ``HookExecution``. A delivery of ``IngesterBatchReady``
advances the batch's executions as far as it can and snoozes while a hook runs, so no
worker sits waiting on a cluster; whichever worker comes back next picks it up from the
rows. A try's name is committed before the runner is asked to launch it: a worker that
dies in between leaves a name that the next attempt launches again, and the runner
adopts the Job it finds under it instead of starting a second.

Before a try is launched, the hook's catalogue entry and values are checked again
(``spec_for``): an entry disabled, withdrawn from the tenant or changed so that the
values no longer fit fails the run at once, saying why, and nothing is launched.

Failures, as the runner sorts them:

- the hook ran and failed (non-zero exit, time limit): a hook failure, its exit code and
  log tail kept; the delivery fails, the run counts it;
- ``PermanentRunnerError``: the same, at once, with the runner's reason;
- ``TransientResourceError``: the breaker counts it, and the delivery retries after its
  backoff (``deliver_after`` = now + min(60 s × 2^n, 5 min), n failures before); once
  its attempts are spent, it is a hook failure too.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Any, NoReturn

import jobs
from ingest import conf
from ingest.runs import breaker, catalogue, events, services
from ingest.runs.errors import InfrastructureError, PermanentRunnerError, TransientResourceError
from ingest.runs.models import BatchStatus, ExecutionStatus, HookExecution, IngestBatch
from ingest.runs.runners import HookRunner, HookSpec, HookStatus, Phase, Resources

LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")
logger = logging.getLogger(__name__)


def check_batch(
    ctx: jobs.JobContext, batch: IngestBatch, executions: list[HookExecution], runner: HookRunner
) -> bool:
    """Advance ``batch``'s hooks (``executions``, in order); True once every one has
    passed (and ``HookBatchCompleted`` is emitted). Raises ``jobs.Snooze`` while a hook
    runs, and the engine's errors when one failed."""
    last: tuple[HookExecution, dict[str, Any]] | None = None
    for execution in executions:
        if execution.status == ExecutionStatus.SUCCEEDED:
            continue
        if execution.status in (ExecutionStatus.FAILED, ExecutionStatus.CANCELLED):
            return False  # recorded when it ended; an operator's retry resets it
        if last is not None:
            _save(ctx, *last)
        last = (execution, _advance(ctx, execution, runner))
    with ctx.batch():
        if last is not None:  # the last hook's success commits with the batch's
            HookExecution.objects.filter(pk=last[0].pk).update(**last[1])
        # Whichever delivery moves the batch to checked emits the event: the row lock of
        # this UPDATE makes a concurrent one wait, then find the batch checked already.
        if IngestBatch.objects.filter(
            pk=batch.pk, status__in=[BatchStatus.FETCHED, BatchStatus.CHECKING]
        ).update(status=BatchStatus.CHECKED, checked_at=ctx.now()):
            events.publish_hooks_completed(batch)
    return True


def _advance(ctx: jobs.JobContext, execution: HookExecution, runner: HookRunner) -> dict[str, Any]:
    """Take one hook as far as it goes now: once it has passed, the fields that say so
    (for the caller to save)."""
    if execution.hook is None:
        _hook_failed(ctx, execution, HookStatus(Phase.FAILED, reason="the hook was removed from its source"))
    if execution.status != ExecutionStatus.RUNNING:
        try:  # before a try is launched: what the entry and the values say now
            spec_for(execution)
        except HookRefused as exc:
            _refused(ctx, execution, runner, exc)
    tenant = execution.batch.run.tenant_id
    admission = None
    if execution.status == ExecutionStatus.RUNNING:
        launched_at = _launched_at(execution)
        status = _call(ctx, execution, runner, lambda spec: runner.poll(spec, launched_at, ctx.now()))
    else:
        admission = breaker.admit(runner.target, tenant, ctx.job.pk, ctx.now())
        if not admission.allowed:
            # Held by the breaker, it is woken when the probe closes it, not a whole
            # cool-down later.
            held_by_breaker = admission.state not in ("full", "share")
            raise jobs.Snooze(
                admission.wait_seconds,
                _held_back(runner.target, admission),
                wake_on=breaker.wake_key(runner.target, tenant) if held_by_breaker else None,
            )
        if runner.blocks:
            # The launch waits for the hook to end: the jobs claimed with this delivery
            # go to other workers meanwhile instead of waiting behind it.
            ctx.hand_back_others()
        if execution.status == ExecutionStatus.WAITING:
            _new_try(ctx, execution, runner)
        else:  # launched before, its outcome unknown: the same name again, timed from now
            _save(ctx, execution, launched_at=ctx.now())
        status = _call(ctx, execution, runner, runner.launch)
    scheduled = status.scheduled or status.phase != Phase.PENDING
    if (
        not scheduled
        and admission is None
        and breaker.withdraw(runner.target, tenant, execution.pk, _launched_at(execution))
    ):
        _withdraw(ctx, execution, runner)  # unless its Job cannot be deleted now
    # The target had room for it; nothing to record if the breaker was settled when it
    # admitted this launch (a success changes nothing then).
    if scheduled and not execution.scheduled and not (admission and admission.settled):
        breaker.record_success(runner.target, tenant, ctx.job.pk, ctx.now())
    if status.phase == Phase.SUCCEEDED:
        return {
            "status": ExecutionStatus.SUCCEEDED,
            "pod_phase": status.pod_phase,
            "scheduled": True,
            "exit_code": status.exit_code,
            "reason": "",
            "log_tail": status.log_tail,
            "finished_at": ctx.now(),
        }
    if status.phase == Phase.FAILED:
        _hook_failed(ctx, execution, status)
    if (execution.status, execution.pod_phase, execution.reason, execution.scheduled) != (
        ExecutionStatus.RUNNING,
        status.pod_phase,
        status.reason,
        scheduled,
    ):
        _save(
            ctx,
            execution,
            status=ExecutionStatus.RUNNING,
            pod_phase=status.pod_phase,
            reason=status.reason,
            scheduled=scheduled,
        )
    raise jobs.Snooze(
        _poll_interval(ctx.now() - _launched_at(execution)), f"hook {execution.hook_name} is {status.phase}"
    )


def _launched_at(execution: HookExecution) -> datetime:
    """When the execution's current try was launched, which every try past waiting has."""
    assert execution.launched_at is not None, f"execution {execution.pk} has no launch time"
    return execution.launched_at


def _held_back(target: str, admission: breaker.Admission) -> str:
    """Why a launch waits, in the words of what holds it: the tenant's launch window on
    the target, or its breaker there."""
    if admission.state == "full":
        return (
            f"this tenant's launch window on {target} is full: {admission.waiting} of its "
            f"hooks launched there wait for room (window {admission.window}); asking "
            f"again in {admission.wait_seconds:.0f}s"
        )
    if admission.state == "share":
        return (
            f"this tenant's hooks on {target} are waiting for its share of the launch "
            f"window: {admission.waiting} of its launches wait for room there, its share "
            f"is {admission.share} of {admission.window} while {admission.tenants} tenants' "
            f"launches wait; asking again in {admission.wait_seconds:.0f}s"
        )
    return (
        f"this tenant's hooks on {target} are held back: its breaker is "
        f"{admission.state}; next probe in {admission.wait_seconds:.0f}s"
    )


def _poll_interval(age: timedelta) -> float:
    """Seconds until the next look at a hook launched ``age`` ago: ``HOOK_POLL_SECONDS``
    at first, then a tenth of its age, up to ``HOOK_POLL_MAX_SECONDS``. Each look costs
    API requests; a hook that has run long is likely to run a while more, and its end
    is noticed at most a tenth of its age (and never more than the cap) late."""
    first = float(conf.get("HOOK_POLL_SECONDS"))
    return max(first, min(age.total_seconds() / 10, float(conf.get("HOOK_POLL_MAX_SECONDS"))))


def _withdraw(ctx: jobs.JobContext, execution: HookExecution, runner: HookRunner) -> None:
    """Take back a launch still waiting for room beyond the tenant's share: its Job is
    deleted (its Pod would keep its place in the cluster's queue ahead of other
    tenants'), and the hook waits to be admitted again, as a new try. Not a failure: the
    breaker counts nothing and no attempt is spent. A Job that cannot be deleted now
    stays, and is polled as before."""
    if not _stop_try(execution, runner):
        return
    _save(
        ctx,
        execution,
        status=ExecutionStatus.WAITING,
        scheduled=False,
        pod_phase="",
        reason=f"try {execution.tries} withdrawn before it got room, for other tenants' "
        "share of the launch window",
    )
    raise jobs.Snooze(
        float(conf.get("QUEUE_WAIT_SECONDS")),
        f"hook {execution.hook_name} withdrawn for other tenants' share of the "
        f"launch window on {runner.target}",
    )


def _new_try(ctx: jobs.JobContext, execution: HookExecution, runner: HookRunner) -> None:
    """Commit the try's name before the runner hears of it, and mark the batch as being
    checked."""
    fields = {
        "status": ExecutionStatus.LAUNCHING,
        "tries": execution.tries + 1,
        "runner_ref": f"conveyor-hook-{execution.pk}-{execution.tries + 1}",
        "runner_target": runner.target,
        "launched_at": ctx.now(),
        "reason": "",
        "pod_phase": "",
        "exit_code": None,
        "log_tail": "",
        "scheduled": False,
    }
    with ctx.batch():
        if execution.batch.status == BatchStatus.FETCHED:  # as loaded: its first hook
            IngestBatch.objects.filter(pk=execution.batch_id, status=BatchStatus.FETCHED).update(
                status=BatchStatus.CHECKING
            )
            execution.batch.status = BatchStatus.CHECKING
        HookExecution.objects.filter(pk=execution.pk).update(**fields)
    for name, value in fields.items():
        setattr(execution, name, value)


def _call(ctx: jobs.JobContext, execution: HookExecution, runner: HookRunner, call) -> HookStatus:
    """A runner call, its infrastructure failures turned into the delivery's outcome."""
    try:
        spec = spec_for(execution)
    except HookRefused as exc:  # the entry changed while the hook ran
        _refused(ctx, execution, runner, exc)
    try:
        return call(spec)
    except TransientResourceError as exc:
        _transient(ctx, execution, runner, exc)
    except PermanentRunnerError as exc:
        _hook_failed(
            ctx,
            execution,
            HookStatus(Phase.FAILED, pod_phase=execution.pod_phase, reason=str(exc)),
            infrastructure=True,
        )


def _transient(
    ctx: jobs.JobContext, execution: HookExecution, runner: HookRunner, exc: TransientResourceError
) -> NoReturn:
    breaker.record_failure(runner.target, execution.batch.run.tenant_id, ctx.job.pk, str(exc), ctx.now())
    reason = f"try {execution.tries}: {exc}"
    if exc.try_ended:
        ended = True
    elif execution.status == ExecutionStatus.LAUNCHING:  # the create may have made it
        ended = _stop_try(execution, runner)
    else:  # a look went unanswered: the hook runs on, and is looked at again
        ended = False
    if ctx.attempt >= ctx.job.max_attempts:
        if not ended:
            _stop_try(execution, runner)
        with ctx.batch():
            services.record_hook_failure(
                execution,
                reason=f"gave up after {ctx.attempt} attempts; {reason}",
                pod_phase=execution.pod_phase,
                current_job=ctx.job.pk,
            )
    elif ended:
        _save(ctx, execution, status=ExecutionStatus.WAITING, reason=reason, scheduled=False)
    else:  # the try may still be out: the next attempt looks at it, never beside it
        _save(ctx, execution, reason=reason)
    raise jobs.TransientError(f"hook {execution.hook_name}: {exc}") from exc


def _stop_try(execution: HookExecution, runner: HookRunner) -> bool:
    """Remove the execution's current try from the runner, if one may be out, so that
    no later try runs beside it; whether none is left (False: the runner could not be
    reached, and the try stays as it was)."""
    if execution.status not in (ExecutionStatus.LAUNCHING, ExecutionStatus.RUNNING):
        return True
    try:
        runner.stop(execution.runner_ref)
    except InfrastructureError as error:
        logger.warning(
            "hook %s: not stopped: %s", execution.runner_ref, error, extra={"execution": execution.pk}
        )
        return False
    return True


def _hook_failed(
    ctx: jobs.JobContext, execution: HookExecution, status: HookStatus, *, infrastructure: bool = False
) -> NoReturn:
    with ctx.batch():
        services.record_hook_failure(
            execution,
            reason=status.reason or "failed",
            exit_code=status.exit_code,
            log_tail=status.log_tail,
            pod_phase=status.pod_phase,
            current_job=ctx.job.pk,
        )
    if infrastructure:
        raise jobs.PermanentError(f"hook {execution.hook_name} cannot run: {status.reason}")
    why = services.hook_failure_text(status.reason, status.exit_code, status.log_tail)
    raise jobs.PermanentError(
        f"hook {execution.hook_name} failed "
        + (f"with {why}" if status.exit_code is not None else f"({why})")
    )


def _refused(
    ctx: jobs.JobContext, execution: HookExecution, runner: HookRunner, exc: HookRefused
) -> NoReturn:
    """The hook may not run as it is: its batch fails and so does the run, whatever its
    failure allowance (every other batch would fail the same way), until the entry or
    the values are put right and an operator retries the run's failed hooks. A try
    already out is stopped (if the runner cannot be reached now, the failed run's
    removal of its hooks takes it)."""
    _stop_try(execution, runner)
    with ctx.batch():
        services.refuse_hook(execution, reason=str(exc), current_job=ctx.job.pk)
    raise jobs.PermanentError(str(exc))


def _save(
    ctx: jobs.JobContext, execution: HookExecution, fields: dict[str, Any] | None = None, **more: Any
) -> None:
    fields = {**(fields or {}), **more}
    for name, value in fields.items():
        setattr(execution, name, value)
    # A lost state write is redone by the next attempt (the runner adopts a try by name),
    # so these commits need not wait for the disk.
    with ctx.batch():
        HookExecution.objects.filter(pk=execution.pk).update(**fields)


class HookRefused(Exception):
    """The hook's catalogue entry, or its values, do not allow it to run now."""


def spec_for(execution: HookExecution) -> HookSpec:
    """What the runner needs for the execution's current try: the catalogue entry's
    image, command, environment, resources and time limit, with the hook's values in
    their places. ``HookRefused`` when the entry is disabled, no longer offered to the
    run's tenant, or no longer fits the values (or the catalogue's rules)."""
    hook = execution.hook
    if hook is None:
        raise HookRefused(f"hook {execution.hook_name} was removed from its source")
    entry = hook.template
    batch = execution.batch
    run = batch.run
    if not entry.enabled:
        raise HookRefused(f"hook {hook.name}: catalogue entry {entry.name!r} is disabled")
    offered = getattr(entry, "offered", None)  # set by sql.batch_with_hooks, else asked
    if offered is None:
        offered = type(entry).objects.offered_to(run.tenant_id).filter(pk=entry.pk).exists()
    if not offered:
        raise HookRefused(f"hook {hook.name}: catalogue entry {entry.name!r} is not offered to this tenant")
    try:
        rendered = catalogue.check_hook(entry, hook.parameters)
    except catalogue.Refused as exc:
        raise HookRefused(f"hook {hook.name} does not fit catalogue entry {entry.name!r}: {exc}") from exc
    tenant = run.tenant.slug
    labels = {
        "conveyor.io/run": str(run.pk),
        "conveyor.io/batch": str(batch.sequence),
        "conveyor.io/tenant": LABEL_VALUE.sub("-", tenant)[:63].strip("-_.") or "none",
        "conveyor.io/hook": hook.name,
    }
    env = {
        **rendered.env,
        "INGEST_RUN": str(run.pk),
        "INGEST_BATCH": str(batch.sequence),
        "INGEST_SOURCE": run.source.name,
        "INGEST_TENANT": tenant,
    }
    return HookSpec(
        name=execution.runner_ref,
        image=entry.image,
        command=rendered.command,
        env=env,
        timeout_seconds=entry.timeout_seconds,
        labels=labels,
        batch_location=services.batches_store(tenant).location(batch.location),
        resources=Resources(
            cpu_request=entry.cpu_request,
            memory_request=entry.memory_request,
            cpu_limit=entry.cpu_limit,
            memory_limit=entry.memory_limit,
        ),
    )
