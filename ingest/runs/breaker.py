"""The hook runner's circuit breaker: pressure on a cluster is shared, not multiplied.

Each delivery's own backoff keeps one batch from hammering a busy cluster, but a
hundred batches backing off independently still make a hundred create calls per
cool-down. The breaker counts transient failures per runner target across every run
and tenant: once ``BREAKER_THRESHOLD`` happened within ``BREAKER_WINDOW_SECONDS`` it
opens, and no hook is launched there at all until its probe time. Then one delivery
(the probe) may launch; a hook that gets scheduled closes the breaker, a failed probe
opens it again for twice the cool-down (up to ``BREAKER_MAX_COOLDOWN_SECONDS``).

Deliveries held back snooze until the probe time without spending an attempt, and come
back together: the engine's claim then takes them in fair shares per tenant, so when
capacity returns one tenant's backlog does not go before everyone else's.

Every change takes the target's row ``FOR UPDATE`` in its own short transaction, so the
decision is one across every worker process.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F

from ingest import conf
from ingest.runs.models import BreakerState, ExecutionStatus, HookExecution, RunnerBreaker

# A probe that neither succeeded nor failed within this long (its worker died) is
# given to the next delivery that asks.
PROBE_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class Admission:
    allowed: bool
    probe: bool = False  # this launch decides whether the breaker closes
    wait_seconds: float = 0.0  # when not allowed: until the next probe
    state: str = BreakerState.CLOSED


def _row(target: str) -> RunnerBreaker:
    RunnerBreaker.objects.get_or_create(target=target)
    return RunnerBreaker.objects.select_for_update().get(target=target)


def _cooldown(breaker: RunnerBreaker, *, longer: bool) -> float:
    base = float(conf.get("BREAKER_COOLDOWN_SECONDS"))
    if not longer or not breaker.cooldown_seconds:
        return base
    return min(breaker.cooldown_seconds * 2, float(conf.get("BREAKER_MAX_COOLDOWN_SECONDS")))


def admit(target: str, job_id: int, now: datetime) -> Admission:
    """May delivery ``job_id`` launch a hook on ``target`` now?

    Closed, it may while fewer launches than the window are waiting for room there
    (launched, not yet scheduled); otherwise it waits ``QUEUE_WAIT_SECONDS`` and asks
    again, so that a full cluster's queue drains before it is made longer."""
    row = RunnerBreaker.objects.filter(target=target).values_list("state", "window").first()
    if row is None or row[0] == BreakerState.CLOSED:
        window = row[1] if row is not None else RunnerBreaker._meta.get_field("window").default
        waiting = HookExecution.objects.filter(
            runner_target=target, status__in=[ExecutionStatus.LAUNCHING, ExecutionStatus.RUNNING],
            scheduled=False)[:window].count()
        if waiting < window:
            return Admission(allowed=True)
        RunnerBreaker.objects.filter(target=target).update(denied=F("denied") + 1)
        return Admission(allowed=False, wait_seconds=float(conf.get("QUEUE_WAIT_SECONDS")),
                         state="full")
    with transaction.atomic():
        breaker = _row(target)
        if breaker.state == BreakerState.CLOSED:
            return Admission(allowed=True)
        if breaker.state == BreakerState.HALF_OPEN and breaker.probe_job == job_id:
            return Admission(allowed=True, probe=True, state=breaker.state)
        probe_abandoned = (breaker.state == BreakerState.HALF_OPEN and breaker.probe_started_at
                           and now - breaker.probe_started_at > PROBE_GRACE)
        if (breaker.state == BreakerState.OPEN and now >= breaker.next_probe_at) or probe_abandoned:
            breaker.state = BreakerState.HALF_OPEN
            breaker.probe_job = job_id
            breaker.probe_started_at = now
            breaker.updated_at = now
            breaker.save(update_fields=["state", "probe_job", "probe_started_at", "updated_at"])
            return Admission(allowed=True, probe=True, state=breaker.state)
        # Held back: until the probe time, or while a probe is out, for one cool-down.
        wake = breaker.next_probe_at if breaker.next_probe_at > now else (
            now + timedelta(seconds=breaker.cooldown_seconds or _cooldown(breaker, longer=False)))
        RunnerBreaker.objects.filter(pk=breaker.pk).update(denied=F("denied") + 1)
        return Admission(allowed=False, wait_seconds=(wake - now).total_seconds(),
                         state=breaker.state)


def record_failure(target: str, job_id: int, message: str, now: datetime) -> RunnerBreaker:
    """A launch or a launched hook on ``target`` failed for the infrastructure's sake."""
    with transaction.atomic():
        breaker = _row(target)
        breaker.last_failure = message[:2000]
        breaker.updated_at = now
        breaker.window = max(1, breaker.window // 2)
        if breaker.state == BreakerState.HALF_OPEN and breaker.probe_job == job_id:
            _open(breaker, now, longer=True)
        elif breaker.state == BreakerState.CLOSED:
            window = timedelta(seconds=float(conf.get("BREAKER_WINDOW_SECONDS")))
            if breaker.window_started_at is None or now - breaker.window_started_at > window:
                breaker.window_started_at = now
                breaker.failures = 0
            breaker.failures += 1
            if breaker.failures >= int(conf.get("BREAKER_THRESHOLD")):
                _open(breaker, now, longer=False)
        breaker.save()
        return breaker


def record_success(target: str, job_id: int, now: datetime) -> None:
    """A hook on ``target`` got room: the target can take more. Widens the launch window
    by one (up to its maximum; a failure halves it, so the window settles where the
    target's room is), and closes an open or probing breaker. Costs one read when there
    is nothing to change."""
    most = int(conf.get("MAX_LAUNCH_WINDOW"))
    row = RunnerBreaker.objects.filter(target=target).values_list("state", "failures", "window").first()
    if row is not None and row == (BreakerState.CLOSED, 0, most):
        return
    with transaction.atomic():
        breaker = _row(target)
        breaker.window = min(most, breaker.window + 1)
        breaker.state = BreakerState.CLOSED
        breaker.failures = 0
        breaker.window_started_at = None
        breaker.next_probe_at = None
        breaker.probe_job = None
        breaker.probe_started_at = None
        breaker.cooldown_seconds = 0
        breaker.updated_at = now
        breaker.save()


def reset(target: str, now: datetime) -> None:
    """Close the breaker by hand (an operator who knows the cluster is back)."""
    RunnerBreaker.objects.filter(target=target).update(
        state=BreakerState.CLOSED, failures=0, window=RunnerBreaker._meta.get_field("window").default,
        window_started_at=None, next_probe_at=None,
        probe_job=None, probe_started_at=None, cooldown_seconds=0, updated_at=now)


def _open(breaker: RunnerBreaker, now: datetime, *, longer: bool) -> None:
    breaker.cooldown_seconds = _cooldown(breaker, longer=longer)
    breaker.state = BreakerState.OPEN
    breaker.opened_at = now
    breaker.next_probe_at = now + timedelta(seconds=breaker.cooldown_seconds)
    breaker.probe_job = None
    breaker.probe_started_at = None
    breaker.times_opened += 1
