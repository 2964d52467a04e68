"""The safety net: rescue jobs of dead workers and wake workers for unsignalled jobs.

Runs every few seconds inside the cluster's workers, one at a time thanks to a
transaction-level advisory lock (a worker that cannot take it skips this round), and
on demand from ``manage.py jobs_recover_stale``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection, transaction

from jobs import clock, engine, metrics, sql
from jobs.conf import WORKER_STALE_SECONDS
from jobs.models import Job, Worker
from jobs.notify import CHANNEL, notify

logger = logging.getLogger(__name__)

REAPER_LOCK_ID = 0x636F6E76  # "conv"


@dataclass
class ReapResult:
    rescued: int = 0
    failed: int = 0
    woken_queues: int = 0
    ran: bool = True
    # (job id, type, new state) of every job taken back, for operators' reports.
    jobs: list[tuple[int, str, str]] = field(default_factory=list)


def reap(limit: int = 500) -> ReapResult:
    """One round: rescue expired leases, nudge due work, forget long-dead workers."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [REAPER_LOCK_ID])
            if not cursor.fetchone()[0]:
                return ReapResult(ran=False)
        result = rescue_expired(limit=limit)
        result.woken_queues = wake_due()
        Worker.objects.filter(last_seen_at__lt=clock.now() - timedelta(seconds=WORKER_STALE_SECONDS)).delete()
    return result


def rescue_expired(limit: int = 500) -> ReapResult:
    """Running jobs whose lease ran out go back to pending (or fail, attempts spent).

    One statement takes them all back (``jobs.sql.rescue_expired``): a node that died
    holding a few hundred jobs is a few milliseconds of one round, not a statement and a
    savepoint per job. Those that failed cancel the children waiting on them."""
    now = clock.now()
    result = ReapResult()
    params: dict[str, Any] = {
        "now": now,
        "limit": limit,
        "error_kind": Job.ErrorKind.LEASE_EXPIRED,
        "channel": CHANNEL,
    }
    # Planned for this round's values (not prepared): a generic plan cannot tell that
    # almost no running job has an expired lease, and would read them all.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.rescue_expired(), params)
        rows = cursor.fetchall()
        for pk, _, state, _ in rows:
            if state == Job.State.FAILED:
                engine.cancel_dependants(pk, now)
    for pk, type_name, state, worker in rows:
        if state == Job.State.PENDING:
            result.rescued += 1
        else:
            result.failed += 1
        result.jobs.append((pk, type_name, state))
        metrics.rescued(type_name)
        logger.warning(
            "rescued job %s (%s) from %s: %s",
            pk,
            type_name,
            worker,
            state,
            extra={"job": pk, "worker": worker},
        )
    return result


def wake_due() -> int:
    """NOTIFY each queue that has due pending jobs, so that no job waits on a lost signal
    (a crash between commit and signal, or a run_after that simply came due)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.due_queues(), {"now": clock.now()})
        queues = [row[0] for row in cursor.fetchall()]
        for queue in queues:
            notify(queue)
    return len(queues)
