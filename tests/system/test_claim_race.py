"""Many worker processes drain one queue: every job runs exactly once."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.db.models import Count

from jobs import engine
from jobs.models import Job, JobEvent
from jobs.notify import raw_connection
from jobs.testing import wait_until

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

JOBS = 20_000
WORKERS = 8


def lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE relation = 'jobs_job'::regclass AND NOT granted")
        return cursor.fetchone()[0]


def test_eight_processes_drain_twenty_thousand_jobs_exactly_once(processes, hits_table):
    engine.enqueue_many("tests.record", [{"n": n} for n in range(JOBS)])
    # The starting line: while this lock is held every worker blocks on its first claim,
    # so that all of them race for the same rows from the same instant.
    gate = raw_connection()
    try:
        gate.execute("BEGIN")
        gate.execute("LOCK TABLE jobs_job IN EXCLUSIVE MODE")
        workers = [processes.manage(f"worker-{n}", "jobs_worker", "--exit-when-idle") for n in range(WORKERS)]
        wait_until(lambda: lock_waiters() >= WORKERS, 60, "every worker to reach its first claim")
        started = time.monotonic()
        gate.execute("COMMIT")
    finally:
        gate.close()  # a failed test must not leave the table locked for the flush
    for worker in workers:
        assert worker.wait(120) == 0, worker.tail()
    wall = time.monotonic() - started
    print(f"{JOBS} jobs drained by {WORKERS} processes in {wall:.2f} s ({JOBS / wall:.0f} jobs/s)")

    jobs = Job.objects.filter(type="tests.record")
    assert jobs.count() == JOBS
    assert jobs.exclude(state=Job.State.SUCCEEDED).count() == 0
    assert jobs.exclude(attempts=1).count() == 0
    assert not JobEvent.objects.filter(kind__in=[JobEvent.Kind.RESCUED, JobEvent.Kind.LEASE_LOST]).exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT worker_pid, count(*) FROM tests_hits GROUP BY worker_pid")
        per_process = dict(cursor.fetchall())
    assert sum(per_process.values()) == JOBS  # job_id is the key: a second run would conflict
    assert set(per_process) == {worker.pid for worker in workers}, per_process
    # A second claim only ever follows a hand-back: a worker whose batch ran past its hold
    # time (a loaded machine) releases the unstarted rest, unspent, for others to claim.
    claims = _per_job(JobEvent.Kind.CLAIMED, more_than=1)
    releases = _per_job(JobEvent.Kind.RELEASED)
    assert all(n == releases.get(job, 0) + 1 for job, n in claims.items()), (claims, releases)


def _per_job(kind: str, *, more_than: int = 0) -> dict[int, int]:
    return dict(
        JobEvent.objects.filter(kind=kind)
        .values("job_id")
        .annotate(n=Count("id"))
        .filter(n__gt=more_than)
        .values_list("job_id", "n")
    )
