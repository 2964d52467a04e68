"""Operating the outbox: how far each subscriber lags, and the three actions an operator
takes on one delivery (quarantine, release, replay).

The admin's outbox console and ``manage.py outbox`` both call these, so they agree on
what a status means and on what is refused. Each action changes the delivery's job
through ``jobs.engine`` (which records the actor and the reason in the job's history) and
takes the job's row lock first, as the engine does, so that an action and a worker, or
two operators, never cross.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models, transaction
from django.db.models import Count, Min, Q, QuerySet

from jobs import clock, engine
from jobs.errors import IllegalTransition, InvalidArgument
from jobs.models import Delivery, Job, JobEvent

State = Job.State
REASON_LENGTH = 500


class Status(models.TextChoices):
    """A delivery's status, from its job's state; a quarantine overrides it."""

    UNDELIVERED = "undelivered", "undelivered"  # its job is pending or running
    FAILING = "failing", "failing"  # undelivered, and waiting out a backoff after an error
    FAILED = "failed", "failed"
    QUARANTINED = "quarantined", "quarantined"
    DELIVERED = "delivered", "delivered"
    CANCELLED = "cancelled", "cancelled"


_HELD = Q(quarantined_at__isnull=False)
_FAILING = Q(job__state=State.PENDING, job__attempts__gt=0, job__last_error__gt="")
_WHERE: dict[str, Q] = {
    Status.UNDELIVERED: ~_HELD & Q(job__state__in=Job.UNFINISHED),
    Status.FAILING: ~_HELD & _FAILING,
    Status.FAILED: ~_HELD & Q(job__state=State.FAILED),
    Status.QUARANTINED: _HELD,
    Status.DELIVERED: ~_HELD & Q(job__state=State.SUCCEEDED),
    Status.CANCELLED: ~_HELD & Q(job__state=State.CANCELLED),
}


def where(status: str) -> Q:
    """The deliveries in ``status`` (failing ones are undelivered too)."""
    return _WHERE[status]


def status_of(delivery: Delivery) -> str:
    if delivery.quarantined_at is not None:
        return Status.QUARANTINED
    job = delivery.job
    if job.state == State.PENDING and job.attempts and job.last_error:
        return Status.FAILING
    return {
        State.PENDING: Status.UNDELIVERED,
        State.RUNNING: Status.UNDELIVERED,
        State.SUCCEEDED: Status.DELIVERED,
        State.FAILED: Status.FAILED,
        State.CANCELLED: Status.CANCELLED,
    }[State(job.state)]


# --- lag per subscriber -------------------------------------------------------------------


@dataclass(frozen=True)
class Lag:
    subscriber: str
    undelivered: int = 0
    oldest: datetime | None = None  # when the oldest undelivered event was published
    failing: int = 0
    failed: int = 0
    quarantined: int = 0

    def oldest_seconds(self, now: datetime) -> float | None:
        return None if self.oldest is None else max((now - self.oldest).total_seconds(), 0.0)


def lag(deliveries: QuerySet[Delivery] | None = None) -> list[Lag]:
    """Per subscriber: undelivered, the oldest undelivered, failing, failed, quarantined.

    Two GROUP BYs that never read a delivered or cancelled delivery: the first starts from
    the jobs that are pending, running or failed (jobs_job_claim_idx, jobs_job_lease_idx,
    jobs_job_state_idx), the second from the quarantined deliveries (jobs_delivery_quarantined_idx).
    ``deliveries`` narrows both (a tenant's, say).
    """
    base = (Delivery.objects.all() if deliveries is None else deliveries).order_by()
    unfinished = Q(job__state__in=Job.UNFINISHED)
    open_rows = (
        base.filter(~_HELD, job__state__in=(*Job.UNFINISHED, State.FAILED))
        .values_list("subscriber")
        .annotate(
            undelivered=Count("pk", filter=unfinished),
            oldest=Min("event__created_at", filter=unfinished),
            failing=Count("pk", filter=_FAILING),
            failed=Count("pk", filter=Q(job__state=State.FAILED)),
        )
    )
    figures: dict[str, dict[str, Any]] = {
        subscriber: {"undelivered": n, "oldest": oldest, "failing": failing, "failed": failed}
        for subscriber, n, oldest, failing, failed in open_rows
    }
    held = base.filter(_HELD).values_list("subscriber").annotate(n=Count("pk"))
    for subscriber, n in held:
        figures.setdefault(subscriber, {})["quarantined"] = n
    return [Lag(subscriber, **figures[subscriber]) for subscriber in sorted(figures)]


def age(seconds: float | None) -> str:
    """A lag as an operator reads it: '42 s', '3 min', '2 h 05 min', '3 d 4 h'."""
    if seconds is None:
        return "—"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3_600:
        return f"{whole // 60} min"
    if whole < 86_400:
        return f"{whole // 3_600} h {whole % 3_600 // 60:02d} min"
    return f"{whole // 86_400} d {whole % 86_400 // 3_600} h"


# --- the operators' actions -----------------------------------------------------------


# The statuses each action applies to: what the console offers (the actions check again
# under the job's row lock).
ACTION_STATUSES: dict[str, tuple[str, ...]] = {
    "quarantine": (Status.UNDELIVERED, Status.FAILING, Status.FAILED, Status.CANCELLED),
    "release": (Status.QUARANTINED,),
    "replay": (Status.DELIVERED, Status.FAILED, Status.CANCELLED),
}


def allows(action: str, delivery: Delivery) -> bool:
    return status_of(delivery) in ACTION_STATUSES[action]


def quarantine(delivery: Delivery, actor: Any, reason: str, *, via: str = "") -> Delivery:
    """Hold a poison delivery back: its job, if unfinished, is cancelled (a running one
    is fenced out: its late result is refused) and it is not run again until released.
    A delivered one is refused: there is nothing left to hold back."""
    reason = _reason(reason)
    with transaction.atomic():
        current = _locked(delivery)
        status = status_of(current)
        if status not in ACTION_STATUSES["quarantine"]:
            raise IllegalTransition(
                _refusal(current, status, "quarantined", "a delivery that is not delivered")
            )
        note = f"quarantined: {reason}"
        if current.job.state in Job.UNFINISHED:
            engine.cancel(current.job, actor=actor, reason=note, via=via)
        else:
            _record(current.job, JobEvent.Kind.QUARANTINED, actor, note, via)
        current.quarantined_at = clock.now()
        current.quarantined_by = _user(actor)
        current.quarantine_reason = reason
        current.save(update_fields=["quarantined_at", "quarantined_by", "quarantine_reason"])
        current.job.refresh_from_db()
    return current


def release(delivery: Delivery, actor: Any, reason: str, *, via: str = "") -> Delivery:
    """End a quarantine: the delivery's job is retried from scratch (attempts reset)."""
    reason = _reason(reason)
    with transaction.atomic():
        current = _locked(delivery)
        status = status_of(current)
        if status != Status.QUARANTINED:
            raise IllegalTransition(_refusal(current, status, "released", "a quarantined delivery"))
        current.quarantined_at, current.quarantined_by, current.quarantine_reason = None, None, ""
        current.save(update_fields=["quarantined_at", "quarantined_by", "quarantine_reason"])
        current.job = engine.retry(
            current.job, actor=actor, reason=f"released from quarantine: {reason}", via=via
        )
    return current


def replay(delivery: Delivery, actor: Any, reason: str, *, via: str = "") -> Delivery:
    """Deliver one event again to one subscriber: a finished delivery (delivered, failed
    or cancelled) runs again; its job's history keeps the earlier outcome."""
    reason = _reason(reason)
    with transaction.atomic():
        current = _locked(delivery)
        status = status_of(current)
        if status == Status.QUARANTINED:
            raise IllegalTransition(
                f"delivery {current.pk} is quarantined: release it instead (a release delivers it again)"
            )
        if status not in ACTION_STATUSES["replay"]:
            raise IllegalTransition(
                _refusal(current, status, "replayed", "a finished delivery (delivered, failed or cancelled)")
            )
        current.job = engine.replay(current.job, actor=actor, reason=f"replayed: {reason}", via=via)
    return current


def _reason(reason: str) -> str:
    reason = (reason or "").strip()[:REASON_LENGTH]
    if not reason:
        raise InvalidArgument(
            "reason", "reason: an outbox action needs a reason, kept in the delivery's job history"
        )
    return reason


def _locked(delivery: Delivery) -> Delivery:
    """The delivery read again with its job, the job's row locked first (the lock the
    engine's transitions take), then the delivery's."""
    Job.objects.select_for_update().filter(pk=delivery.job_id).values_list("pk").get()
    return Delivery.objects.select_for_update(of=("self",)).select_related("job", "event").get(pk=delivery.pk)


def _refusal(delivery: Delivery, status: str, past: str, needs: str) -> str:
    return (
        f"delivery {delivery.pk} ({delivery.event} → {delivery.subscriber}) is {status}; "
        f"only {needs} can be {past}"
    )


def _user(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


def _record(job: Job, kind: str, actor: Any, message: str, via: str) -> None:
    """An action that leaves the job's state as it is, in its history all the same."""
    JobEvent.objects.create(
        job=job,
        at=clock.now(),
        kind=kind,
        from_status=job.state,
        to_status=job.state,
        message=message,
        attempt=job.attempts,
        actor=_user(actor),
        via=via,
    )
