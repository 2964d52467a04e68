""""Why isn't this running?" — an answer computed from the job's state and its neighbours.

The answer is shown to the job's tenant, so it names only that tenant's jobs: a key
held by another tenant's job (a type whose keys are global) is said without its id,
and the jobs counted ahead in the queue are the tenant's own.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils.timesince import timeuntil

from jobs import clock, registry
from jobs.conf import WORKER_STALE_SECONDS
from jobs.models import Job, Worker


def explain(job: Job) -> str:
    """One line an operator can act on, for a job in any state."""
    now = clock.now()
    if job.state == Job.State.RUNNING:
        if job.lease_expires_at and job.lease_expires_at < now:
            return (f"running on {job.locked_by}, but its lease expired at "
                    f"{job.lease_expires_at:%H:%M:%S}; the reaper will rescue it")
        return f"running on {job.locked_by} (attempt {job.attempts} of {job.max_attempts})"
    if job.state != Job.State.PENDING:
        return {
            Job.State.SUCCEEDED: "finished successfully",
            Job.State.FAILED: f"failed ({job.get_error_kind_display() or 'error'}); retry it to run again",
            Job.State.CANCELLED: "cancelled; retry it to run again",
        }[job.state]
    return _why_pending(job, now)


def _why_pending(job: Job, now: datetime) -> str:
    if registry.get(job.type) is None:
        return f"its handler {job.type!r} is not registered in this deployment"
    if job.run_after > now:
        last = job.events.order_by("-id").values_list("kind", flat=True).first()
        reason = {"retry_scheduled": "retry backoff", "snoozed": "snoozed"}.get(last or "", "scheduled")
        return f"waiting for run_after ({reason}): due in {timeuntil(job.run_after, now)}"
    if job.parent_id is not None:
        parent = Job.objects.filter(pk=job.parent_id).values_list("state", flat=True).first()
        if parent is not None and parent != Job.State.SUCCEEDED:
            return f"waiting on its parent job {job.parent_id} ({parent})"
    if job.concurrency_key:
        holder = (Job.objects.filter(concurrency_key=job.concurrency_key, key_scope=job.key_scope,
                                     state=Job.State.RUNNING)
                  .exclude(pk=job.pk).values_list("pk", "tenant_id").first())
        if holder is not None:
            return f"its concurrency key {job.concurrency_key!r} is held by {_whose(job, holder)}"
        ahead_of_it = (Job.objects.due(now).filter(concurrency_key=job.concurrency_key,
                                                   key_scope=job.key_scope, pk__lt=job.pk)
                       .order_by("id").values_list("pk", "tenant_id").first())
        if ahead_of_it is not None:
            return (f"jobs of its concurrency key {job.concurrency_key!r} run in the order "
                    f"they came: {_whose(job, ahead_of_it)} goes first")
    live = Worker.objects.filter(last_seen_at__gte=now - timedelta(seconds=WORKER_STALE_SECONDS))
    if not any(worker.serves(job.queue) for worker in live):
        return f"no live worker serves queue {job.queue!r}; start the cluster (manage.py qcluster)"
    # Counting stops at 1,000: on a deep backlog the exact figure is not worth a long scan.
    ahead = len(Job.objects.due(now).filter(queue=job.queue, priority__gte=job.priority,
                                            tenant_id=job.tenant_id, pk__lt=job.pk)
                .values_list("pk", flat=True)[:1000])
    more = "+" if ahead == 1000 else ""
    whose = "of its tenant's " if job.tenant_id is not None else ""
    return (f"due; {ahead}{more} {whose}job(s) ahead of it in queue {job.queue!r}, waiting for "
            f"a free worker")


def _whose(job: Job, other: tuple[int, int | None]) -> str:
    """Another job as ``job``'s tenant may see it named."""
    pk, tenant_id = other
    return f"job {pk}" if tenant_id == job.tenant_id else "another tenant's job"
