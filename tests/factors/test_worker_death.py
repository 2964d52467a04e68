"""A worker SIGKILLed in the middle of a csv_ingest batch: after recovery every row is in
the table exactly once and the stats are right."""

from __future__ import annotations

import os
import signal

import pytest

from factors import stats
from factors.models import DataEntry, Emission
from jobs.models import Job, JobEvent
from jobs.notify import raw_connection
from jobs.testing import wait_until
from tests.support.factors.builders import (
    PLANE_FACTORS,
    csv_bytes,
    dispatch,
    expected_totals,
    module,
    plane_factors,
    plane_rows,
    report,
)

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

# Short leases; recalculation chunks of 15,000 rows (three batches), so that the kill
# lands between, at or right after a chunk boundary, whichever batch it hits.
FAST = {
    "JOBS_LEASE_SECONDS": "2",
    "JOBS_HEARTBEAT_SECONDS": "0.5",
    "JOBS_REAPER_SECONDS": "0.5",
    "FACTORS_RECALC_CHUNK_ROWS": "15000",
}
ROWS = 60_000  # twelve batches of 5,000


def loaded(job_id: int) -> int:
    return DataEntry.objects.filter(job_id=job_id).count()


def blocked_on_a_lock() -> bool:
    """The worker's connection waits on our table lock, inside a batch's COPY."""
    conn = raw_connection()
    try:
        return bool(
            conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'COPY factors_dataentry%%'"
            ).fetchone()
        )
    finally:
        conn.close()


def test_a_worker_killed_mid_batch_leaves_each_row_exactly_once_after_recovery(processes, upload_dir):
    plane_factors()
    travel = module(report())
    rows = plane_rows(ROWS)
    ingest = dispatch(travel, csv_bytes(HEADER, rows)).job
    victim = processes.manage("victim", "jobs_worker", env=processes.env(**FAST))
    wait_until(lambda: loaded(ingest.pk) >= 5_000, 60, "the first batches to commit")

    # Hold a lock that stops the next batch in its INSERT (its COPY already done), then
    # kill the worker there: mid-batch, with earlier batches committed.
    gate = raw_connection()
    try:
        gate.execute("BEGIN")
        gate.execute("LOCK TABLE factors_dataentry IN SHARE ROW EXCLUSIVE MODE")
        wait_until(blocked_on_a_lock, 30, "the worker to block inside a batch")
        before_kill = loaded(ingest.pk)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
    finally:
        gate.execute("ROLLBACK")
        gate.close()
    assert 0 < before_kill < ROWS and before_kill % 5_000 == 0

    processes.manage("rescuer", "jobs_worker", env=processes.env(**FAST))
    wait_until(
        lambda: Job.objects.filter(
            pipeline_id=ingest.pipeline_id, type="factors.aggregation", state=Job.State.SUCCEEDED
        ).exists(),
        90,
        "the pipeline to finish after the rescue",
    )

    ingest.refresh_from_db()
    assert (ingest.state, ingest.attempts, ingest.rescues) == (Job.State.SUCCEEDED, 2, 1)
    assert ingest.events.filter(kind=JobEvent.Kind.RESCUED).exists()
    assert ingest.result["resumed_from"] == before_kill
    numbers = list(DataEntry.objects.filter(module=travel).values_list("row_number", flat=True))
    assert sorted(numbers) == list(range(2, ROWS + 2))  # each row once, none missing
    travel.refresh_from_db()
    count, quantity, kg, missing = expected_totals(rows, PLANE_FACTORS)
    assert (travel.stats["entries"], travel.stats["kg_co2e"], travel.stats["without_factor"]) == (
        count,
        stats.amount(kg),
        missing,
    )
    assert Emission.objects.filter(data_entry__module=travel).count() == count - missing
    chunks = Job.objects.filter(pipeline_id=ingest.pipeline_id, payload__has_key="chunk_of")
    assert chunks.exists() and not chunks.exclude(state=Job.State.SUCCEEDED).exists()


HEADER = ["quantity", "unit", "haul", "cabin"]
