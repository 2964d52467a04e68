""" "Why isn't this running?" — an answer computed from the job's state and its neighbours.

The answer is shown to the job's tenant, so it names only that tenant's jobs: a key
held by another tenant's job (a type whose keys are global) is said without its id,
and the jobs counted ahead in the queue are the tenant's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, Q, QuerySet
from django.utils.timesince import timeuntil

from jobs import clock, registry
from jobs.conf import WORKER_STALE_SECONDS
from jobs.models import Dependency, Job, Worker, unfinished_prerequisites


def explain(job: Job) -> str:
    """One line an operator can act on, for a job in any state."""
    now = clock.now()
    if job.state == Job.State.RUNNING:
        return _why_running(job, now)
    if job.state == Job.State.FAILED:
        error = error_line(job.last_error)
        return (
            f"failed ({job.get_error_kind_display() or 'error'})"
            f"{': ' + error if error else ''}; retry it to run again"
        )
    if job.state != Job.State.PENDING:
        return {
            Job.State.SUCCEEDED: "finished successfully",
            Job.State.CANCELLED: "cancelled; retry it to run again",
        }[Job.State(job.state)]
    return _why_pending(job, now)


def error_line(error: str, limit: int = 200) -> str:
    """The line of an error that says what went wrong: its first (``Type: message``), or,
    for a text that starts with a traceback, its last."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass(frozen=True)
class LeaseHealth:
    """A running job's lease as an operator must weigh it before taking the job away:
    ``alive`` while its worker heartbeats and the lease holds (the job really runs)."""

    alive: bool
    text: str


def lease_health(job: Job, now: datetime | None = None) -> LeaseHealth | None:
    """None unless the job is running."""
    if job.state != Job.State.RUNNING:
        return None
    now = now or clock.now()
    seen, fresh = _worker_seen(job, now)
    if seen is not None and fresh and not _lease_expired(job, now):  # fresh: seen lately
        ago = max(0, int((now - seen).total_seconds()))
        return LeaseHealth(
            True,
            f"worker {job.locked_by} is alive (seen {ago} s ago); the "
            f"lease is renewed until {job.lease_expires_at:%H:%M:%S}",
        )
    if seen is None:
        return LeaseHealth(False, f"worker {job.locked_by} is gone: the lease is not renewed")
    return LeaseHealth(
        False, f"worker {job.locked_by} was last seen at {seen:%H:%M:%S}: the lease is not renewed"
    )


def _worker_seen(job: Job, now: datetime) -> tuple[datetime | None, bool]:
    """When the job's worker was last seen, and whether that is recent enough to be alive."""
    seen = Worker.objects.filter(name=job.locked_by).values_list("last_seen_at", flat=True).first()
    return seen, seen is not None and seen >= now - timedelta(seconds=WORKER_STALE_SECONDS)


def _lease_expired(job: Job, now: datetime) -> bool:
    return job.lease_expires_at is not None and job.lease_expires_at < now


def live_workers(now: datetime) -> QuerySet[Worker]:
    return Worker.objects.filter(last_seen_at__gte=now - timedelta(seconds=WORKER_STALE_SECONDS))


def live_worker_count() -> int:
    """How many engine workers heartbeat now; 0 when no cluster runs. For commands that
    run jobs inline when alone: with a cluster running, they hand their jobs to it
    instead of racing its workers for them."""
    return live_workers(clock.now()).count()


def _why_running(job: Job, now: datetime) -> str:
    """Running as it should, or held by a dead worker: then who will take it back, if
    anyone. Every live worker runs the reaper, whatever queues it serves; with none
    alive, nothing does until a cluster starts or an operator steps in."""
    where = f"running on {job.locked_by}"
    expired = _lease_expired(job, now)
    seen, alive = _worker_seen(job, now)
    if alive and not expired:
        return f"{where} (attempt {job.attempts} of {job.max_attempts})"
    rescuer = alive or live_workers(now).exists()
    by_hand = f"the admin's Recover action or POST /api/jobs/{job.pk}/recover/"
    if expired:
        lease = f"its lease expired at {job.lease_expires_at:%H:%M:%S}"
        if rescuer:
            return (
                f"{where}, but {lease}; the reaper of a live worker rescues it between "
                f"that worker's batches, or recover it now with {by_hand}"
            )
        return (
            f"{where}, but {lease} and no worker is alive to rescue it: starting the "
            f"cluster (manage.py qcluster) will, as will manage.py jobs_recover_stale; "
            f"or recover it with {by_hand}"
        )
    worker = (
        f"that worker was last seen at {seen:%H:%M:%S}" if seen else "that worker is no longer registered"
    )
    ends = f"once its lease ends at {job.lease_expires_at:%H:%M:%S}"
    if rescuer:
        return (
            f"{where}, but {worker}; {ends}, a live worker's reaper will rescue it, or "
            f"recover it now with {by_hand}"
        )
    return (
        f"{where}, but {worker} and no worker is alive: {ends}, starting the cluster "
        f"(manage.py qcluster) or manage.py jobs_recover_stale will rescue it; or recover "
        f"it now with {by_hand}"
    )


def _why_pending(job: Job, now: datetime) -> str:
    if registry.get(job.type) is None:
        return f"its handler {job.type!r} is not registered in this deployment"
    if job.run_after > now:
        last = job.events.order_by("-id").values_list("kind", flat=True).first()
        reason = {"retry_scheduled": "retry backoff", "snoozed": "snoozed"}.get(last or "", "scheduled")
        due = f"waiting for run_after ({reason}): due in {timeuntil(job.run_after, now)}"
        if job.wake_key is not None:
            due += f", or as soon as {job.wake_key!r} is woken"
        error = error_line(job.last_error) if last == "retry_scheduled" else ""
        return f"{due}; the last attempt failed: {error}" if error else due
    if job.parent_id is not None:
        parent = Job.objects.filter(pk=job.parent_id).values_list("state", flat=True).first()
        if parent is not None and parent != Job.State.SUCCEEDED:
            return f"waiting on its parent job {job.parent_id} ({parent})"
    # Counting stops at 100, like the queue's below: the first few ids are what helps.
    waiting = list(
        Dependency.objects.filter(waiter=job.pk, prerequisite__state__in=Job.UNFINISHED)
        .order_by("prerequisite_id")
        .values_list("prerequisite_id", flat=True)[:100]
    )
    if waiting:
        count = f"{len(waiting)}{'+' if len(waiting) == 100 else ''}"
        shown = ", ".join(map(str, waiting[:5])) + (", …" if len(waiting) > 5 else "")
        return f"waiting for {count} job(s) it fans in from to finish: {shown}"
    if job.concurrency_key:
        holder = (
            Job.objects.filter(
                concurrency_key=job.concurrency_key, key_scope=job.key_scope, state=Job.State.RUNNING
            )
            .exclude(pk=job.pk)
            .values_list("pk", "tenant_id")
            .first()
        )
        if holder is not None:
            return f"its concurrency key {job.concurrency_key!r} is held by {_whose(job, holder)}"
        # As the claim sees the key's queue: an earlier job waiting on its parent, or on
        # jobs it fans in from, does not go first.
        ahead_of_it = (
            Job.objects.due(now)
            .filter(concurrency_key=job.concurrency_key, key_scope=job.key_scope, pk__lt=job.pk)
            .filter(Q(parent__isnull=True) | Q(parent__state=Job.State.SUCCEEDED))
            .filter(~Exists(unfinished_prerequisites()))
            .order_by("id")
            .values_list("pk", "tenant_id")
            .first()
        )
        if ahead_of_it is not None:
            return (
                f"jobs of its concurrency key {job.concurrency_key!r} run in the order "
                f"they came: {_whose(job, ahead_of_it)} goes first"
            )
    handler = registry.get(job.type)
    if handler is not None and handler.remote:
        if not any(worker.is_remote and worker.serves(job.queue) for worker in live_workers(now)):
            return (
                f"no remote worker serves queue {job.queue!r}: {job.type} runs on remote workers "
                "(a credential for the queue in JOBS_REMOTE_WORKERS), and none has asked for work lately"
            )
    elif not any(not worker.is_remote and worker.serves(job.queue) for worker in live_workers(now)):
        return f"no live worker serves queue {job.queue!r}; start the cluster (manage.py qcluster)"
    # Counting stops at 1,000: on a deep backlog the exact figure is not worth a long scan.
    ahead = len(
        Job.objects.due(now)
        .filter(queue=job.queue, priority__gte=job.priority, tenant_id=job.tenant_id, pk__lt=job.pk)
        .values_list("pk", flat=True)[:1000]
    )
    more = "+" if ahead == 1000 else ""
    whose = "of its tenant's " if job.tenant_id is not None else ""
    return f"due; {ahead}{more} {whose}job(s) ahead of it in queue {job.queue!r}, waiting for a free worker"


def _whose(job: Job, other: tuple[int, int | None]) -> str:
    """Another job as ``job``'s tenant may see it named."""
    pk, tenant_id = other
    return f"job {pk}" if tenant_id == job.tenant_id else "another tenant's job"
