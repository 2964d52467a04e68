"""A claimer process for the concurrency-key race (tests/system/test_concurrency_key.py).

For each round it waits at a starting gate (a PostgreSQL advisory lock that the test
holds and releases when both claimers are waiting on it), claims one ``tests.keyed``
job and prints one JSON line: the jobs it won and whether the unique index
``jobs_job_one_current_per_key`` turned it away.

    python -m tests.support.keyed_claimer ROUNDS GATE
"""

from __future__ import annotations

import json
import logging
import sys

import django


class IndexLosses(logging.Handler):
    """Counts the engine's "key held by another claimer" records (an IntegrityError)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "held by another claimer" in record.getMessage():
            self.count += 1


def main(rounds: int, gate: int) -> None:
    django.setup()
    from django.db import connection

    from jobs import engine

    losses = IndexLosses()
    engine_log = logging.getLogger("jobs.engine")
    engine_log.addHandler(losses)
    engine_log.setLevel(logging.INFO)
    for round_ in range(rounds):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock_shared(%s, %s)", [gate, round_])
        before = losses.count
        batch = engine.claim(f"claimer-{round_}", limit=1, types=["tests.keyed"])
        print(
            json.dumps(
                {
                    "round": round_,
                    "won": [job.pk for job in batch.jobs],
                    "token": str(batch.token),
                    "lost_at_index": losses.count > before,
                }
            ),
            flush=True,
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_shared(%s, %s)", [gate, round_])


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
