"""The hook runner's circuit breakers: pressure on a cluster is shared, not multiplied,
and one tenant's faults stay with that tenant.

Each delivery's own backoff keeps one batch from hammering a busy cluster, but a
hundred batches backing off independently still make a hundred create calls per
cool-down. A breaker counts transient failures per runner target and tenant, across
that tenant's runs: once ``BREAKER_THRESHOLD`` happened within ``BREAKER_WINDOW_SECONDS``
it opens, and none of the tenant's hooks is launched there until its probe time. Then
one delivery (the probe) may launch; a hook that gets scheduled closes the breaker, a
failed probe opens it again for twice the cool-down (up to
``BREAKER_MAX_COOLDOWN_SECONDS``).

Why per tenant: what fails transiently is often the tenant's own doing (hooks asking
for more than a node has, a quota of theirs, Pods evicted for their memory), and a
breaker shared by all tenants let one tenant's failing hooks stall every other
tenant's. A cluster that is really full is learnt by each tenant's breaker in its own
window: at most ``BREAKER_THRESHOLD`` failed launches per tenant before it opens. The
launch window is per tenant too, so one tenant's queue of launches waiting for room
does not hold another's; and while several tenants' launches wait for room on a
target, each may have only its share of its window waiting (``withdraw`` takes back
what is beyond it), so that one tenant's queue does not stand in front of every other
tenant's hooks: the cluster gives room first come.

Deliveries held back snooze until the probe time without spending an attempt, or until
the probe's success closes the breaker and wakes them (``wake_key``), and come back
together: the engine's claim then takes them in fair shares per tenant, so when
capacity returns one tenant's backlog does not go before everyone else's.

Every change takes the (target, tenant) row ``FOR UPDATE`` in its own short
transaction, so the decision is one across every worker process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F

import jobs
from ingest import conf
from ingest.runs.models import BreakerState, ExecutionStatus, RunnerBreaker

# A probe that neither succeeded nor failed within this long (its worker died) is
# given to the next delivery that asks.
PROBE_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class Admission:
    allowed: bool
    probe: bool = False  # this launch decides whether the breaker closes
    wait_seconds: float = 0.0  # when not allowed: until the next probe
    state: str = BreakerState.CLOSED
    # Closed, with no failure counted and the window at its widest: a success would
    # change nothing, so the caller need not record one.
    settled: bool = False
    # The launch window's count, when it decided: the tenant's launches waiting for room,
    # its window, as many as it may have waiting now (its share of that window), and the
    # tenants with launches waiting there (the asking one included) that it is shared among.
    waiting: int = 0
    window: int = 0
    share: int = 0
    tenants: int = 1


def _row(target: str, tenant: int) -> RunnerBreaker:
    RunnerBreaker.objects.get_or_create(target=target, tenant_id=tenant)
    return RunnerBreaker.objects.select_for_update().get(target=target, tenant_id=tenant)


def _cooldown(breaker: RunnerBreaker, *, longer: bool) -> float:
    base = float(conf.get("BREAKER_COOLDOWN_SECONDS"))
    if not longer or not breaker.cooldown_seconds:
        return base
    return min(breaker.cooldown_seconds * 2, float(conf.get("BREAKER_MAX_COOLDOWN_SECONDS")))


# The closed path of ``admit`` in one round trip: the tenant's breaker on the target, its
# launch window, how many of the tenant's launches wait for room there (counted no
# further than the window), and how many other tenants have launches waiting there (as
# far as the window: beyond that every tenant's share is one). The executions carry
# their run's tenant, so both counts are read from the partial index
# ingest_hook_awaiting_room (runner_target, tenant_id) alone; the other tenants are
# found by skipping from one tenant id to the next in it (one index probe per tenant, not
# one row per launch). ``{mine}`` narrows the tenant's count to the launches made no
# later than one of them (``withdraw``).
_SHARE = """
WITH RECURSIVE waiting_tenant(tenant) AS (
    (SELECT e.tenant_id FROM ingest_hookexecution e
     WHERE e.runner_target = %(target)s AND NOT e.scheduled
       AND e.status IN (%(launching)s, %(running)s)
     ORDER BY e.tenant_id LIMIT 1)
    UNION ALL
    SELECT next.tenant_id FROM waiting_tenant w, LATERAL (
        SELECT e.tenant_id FROM ingest_hookexecution e
        WHERE e.runner_target = %(target)s AND NOT e.scheduled
          AND e.status IN (%(launching)s, %(running)s) AND e.tenant_id > w.tenant
        ORDER BY e.tenant_id LIMIT 1) AS next
)
SELECT b.state, b."window", b.failures, (
    SELECT count(*) FROM (
        SELECT FROM ingest_hookexecution e
        WHERE e.runner_target = t.target AND e.tenant_id = t.tenant AND NOT e.scheduled
          AND e.status IN (%(launching)s, %(running)s){mine}
        LIMIT COALESCE(b."window", %(window)s)) AS waiting), (
    SELECT count(*) FROM (
        SELECT FROM waiting_tenant w WHERE w.tenant <> t.tenant
        LIMIT COALESCE(b."window", %(window)s)) AS others)
FROM (SELECT %(target)s::text AS target, %(tenant)s::bigint AS tenant) AS t
LEFT JOIN ingest_runnerbreaker b ON b.target = t.target AND b.tenant_id = t.tenant
"""
_ADMIT = _SHARE.format(mine="")
_WITHDRAW = _SHARE.format(mine="\n          AND (e.launched_at, e.id) <= (%(launched_at)s, %(execution)s)")


# ``record_success`` in one round trip: an open or probing breaker closed and the window
# widened by one, or the (target, tenant) row created; what the breaker's state was
# before comes back (read from the statement's snapshot: a concurrent change makes at
# worst one wake-up too many or too few, and a held delivery's snooze ends anyway). A
# breaker that is closed, clean and at its widest (a healthy target's steady state)
# matches neither, and the statement then neither writes nor locks anything.
_SUCCEEDED = """
WITH before AS (
    SELECT id, state FROM ingest_runnerbreaker
    WHERE target = %(target)s AND tenant_id = %(tenant)s
), widened AS (
    UPDATE ingest_runnerbreaker b SET
        "window" = LEAST(b."window" + 1, %(most)s), state = %(closed)s, failures = 0,
        window_started_at = NULL, next_probe_at = NULL, probe_job = NULL,
        probe_started_at = NULL, cooldown_seconds = 0, updated_at = %(now)s
    FROM before
    WHERE b.id = before.id
      AND NOT (b.state = %(closed)s AND b.failures = 0 AND b."window" = %(most)s)
    RETURNING before.state AS was
), created AS (
    INSERT INTO ingest_runnerbreaker (
        target, tenant_id, state, failures, cooldown_seconds, "window", times_opened, denied,
        last_failure, updated_at)
    SELECT %(target)s, %(tenant)s, %(closed)s, 0, 0, LEAST(%(window)s + 1, %(most)s), 0, 0, '',
           %(now)s
    WHERE NOT EXISTS (SELECT FROM before)
    ON CONFLICT (target, tenant_id) DO NOTHING
)
SELECT was FROM widened
"""


def wake_key(target: str, tenant: int) -> str:
    """The engine's wake-up key of deliveries held back by ``tenant``'s breaker on
    ``target`` (``jobs.Snooze(wake_on=...)``): closing the breaker wakes them."""
    return f"ingest.breaker:{tenant}:{hashlib.sha256(target.encode()).hexdigest()[:32]}"


def _default_window() -> int:
    return RunnerBreaker._meta.get_field("window").default


def _share(window: int, others: int) -> int:
    """How many launches a tenant may have waiting for room on a target: its window,
    divided among the tenants with launches waiting there. Pods pending on a full
    cluster get a node roughly first come, so every launch a tenant adds to the queue is
    one more hook each other tenant waits behind."""
    return max(1, window // (others + 1))


def _count(sql: str, target: str, tenant: int, **more: Any) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "target": target,
                "tenant": tenant,
                "window": _default_window(),
                "launching": ExecutionStatus.LAUNCHING,
                "running": ExecutionStatus.RUNNING,
                **more,
            },
        )
        return cursor.fetchone()


def admit(target: str, tenant: int, job_id: int, now: datetime) -> Admission:
    """May delivery ``job_id`` launch a hook of ``tenant`` on ``target`` now?

    Closed, it may while fewer of the tenant's launches than its share of the window are
    waiting for room there (launched, not yet scheduled): the whole window when no other
    tenant's launches wait there, else the window divided among the tenants whose do.
    Otherwise it waits ``QUEUE_WAIT_SECONDS`` and asks again, so that a full cluster's
    queue drains before it is made longer, and a tenant's queue does not grow in front of
    another's."""
    state, window, failures, waiting, others = _count(_ADMIT, target, tenant)
    if state is None or state == BreakerState.CLOSED:
        window = window or _default_window()
        share = _share(window, others)
        counts = {"waiting": waiting, "window": window, "share": share, "tenants": others + 1}
        if waiting < share:
            return Admission(
                allowed=True,
                settled=(failures == 0 and window == int(conf.get("MAX_LAUNCH_WINDOW"))),
                **counts,
            )
        RunnerBreaker.objects.filter(target=target, tenant_id=tenant).update(denied=F("denied") + 1)
        return Admission(
            allowed=False,
            wait_seconds=float(conf.get("QUEUE_WAIT_SECONDS")),
            state="share" if others else "full",
            **counts,
        )
    with transaction.atomic():
        breaker = _row(target, tenant)
        if breaker.state == BreakerState.CLOSED:
            return Admission(allowed=True)
        assert breaker.next_probe_at is not None  # every breaker not closed has one (a check constraint)
        if breaker.state == BreakerState.HALF_OPEN and breaker.probe_job == job_id:
            return Admission(allowed=True, probe=True, state=breaker.state)
        probe_abandoned = (
            breaker.state == BreakerState.HALF_OPEN
            and breaker.probe_started_at
            and now - breaker.probe_started_at > PROBE_GRACE
        )
        if (breaker.state == BreakerState.OPEN and now >= breaker.next_probe_at) or probe_abandoned:
            breaker.state = BreakerState.HALF_OPEN
            breaker.probe_job = job_id
            breaker.probe_started_at = now
            breaker.updated_at = now
            breaker.save(update_fields=["state", "probe_job", "probe_started_at", "updated_at"])
            return Admission(allowed=True, probe=True, state=breaker.state)
        # Held back: until the probe time, or while a probe is out, for one cool-down.
        wake = (
            breaker.next_probe_at
            if breaker.next_probe_at > now
            else (now + timedelta(seconds=breaker.cooldown_seconds or _cooldown(breaker, longer=False)))
        )
        RunnerBreaker.objects.filter(pk=breaker.pk).update(denied=F("denied") + 1)
        return Admission(allowed=False, wait_seconds=(wake - now).total_seconds(), state=breaker.state)


def withdraw(target: str, tenant: int, execution: int, launched_at: datetime) -> bool:
    """Should ``tenant``'s launch ``execution`` (made at ``launched_at``, still waiting
    for room on ``target``) be taken back to give other tenants their share?

    Yes when other tenants' launches wait there too and it is not among the first of its
    tenant's as many as its share: its Pod would otherwise hold its place in the
    cluster's queue ahead of theirs. A tenant alone keeps every launch it made, even
    beyond a window that has shrunk since."""
    _, window, _, earlier, others = _count(
        _WITHDRAW, target, tenant, execution=execution, launched_at=launched_at
    )
    return others > 0 and earlier > _share(window or _default_window(), others)


def record_failure(target: str, tenant: int, job_id: int, message: str, now: datetime) -> RunnerBreaker:
    """A launch or a launched hook of ``tenant`` on ``target`` failed for the
    infrastructure's sake."""
    with transaction.atomic():
        breaker = _row(target, tenant)
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


def record_success(target: str, tenant: int, job_id: int, now: datetime) -> None:
    """A hook of ``tenant`` on ``target`` got room: the target can take more of the
    tenant's. Widens the launch window by one (up to its maximum; a failure halves it,
    so the window settles where the target's room is), and closes an open or probing
    breaker, waking the deliveries it held back (at this transaction's commit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SUCCEEDED,
            {
                "target": target,
                "tenant": tenant,
                "closed": BreakerState.CLOSED,
                "window": _default_window(),
                "most": int(conf.get("MAX_LAUNCH_WINDOW")),
                "now": now,
            },
        )
        was = cursor.fetchone()
    if was is not None and was[0] != BreakerState.CLOSED:
        jobs.wake(wake_key(target, tenant))


def reset(target: str, tenant: int, now: datetime) -> None:
    """Close ``tenant``'s breaker on ``target`` by hand (an operator who knows the cluster
    is back), waking the deliveries it held back."""
    with transaction.atomic():
        RunnerBreaker.objects.filter(target=target, tenant_id=tenant).update(
            state=BreakerState.CLOSED,
            failures=0,
            window=_default_window(),
            window_started_at=None,
            next_probe_at=None,
            probe_job=None,
            probe_started_at=None,
            cooldown_seconds=0,
            updated_at=now,
        )
        jobs.wake(wake_key(target, tenant))


def _open(breaker: RunnerBreaker, now: datetime, *, longer: bool) -> None:
    breaker.cooldown_seconds = _cooldown(breaker, longer=longer)
    breaker.state = BreakerState.OPEN
    breaker.opened_at = now
    breaker.next_probe_at = now + timedelta(seconds=breaker.cooldown_seconds)
    breaker.probe_job = None
    breaker.probe_started_at = None
    breaker.times_opened += 1
