"""The due jobs of a group of queues: the figure an autoscaler adds cluster pods on.

KEDA's PostgreSQL scaler runs ``due_jobs_query(queues)`` verbatim (deploy/), and /metrics
shows the same count per queue as ``conveyor_jobs_due`` (``due_by_queue``), so that the
figure on a dashboard is the one the autoscaler acted on. Plain SQL, not the ORM: the
scaler knows nothing of Django. It counts what is due by time; a job that also waits on
another (``after=``) is counted too, so the figure is an upper bound of what a claim
would take now.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.db import connection

# Served by the partial index on pending jobs (queue, priority, id).
DUE = "state = 'pending' AND run_after <= now()"
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,50}")


def due_jobs_query(queues: Iterable[str]) -> str:
    """``SELECT count(*)`` of the due jobs of ``queues`` (names are quoted literals)."""
    names = sorted(set(queues))
    if not names:
        raise ValueError("a scaler serves at least one queue")
    for name in names:
        if not _QUEUE_NAME.fullmatch(name):
            raise ValueError(f"not a queue name: {name!r}")
    listed = ", ".join(f"'{name}'" for name in names)
    return f"SELECT count(*) FROM jobs_job WHERE {DUE} AND queue IN ({listed})"


def due_by_queue() -> dict[str, int]:
    """The due jobs of every queue that has any, in one query."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT queue, count(*) FROM jobs_job WHERE {DUE} GROUP BY queue")
        return dict(cursor.fetchall())
