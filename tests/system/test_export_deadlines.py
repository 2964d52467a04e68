"""Deadlines and cancels reach a running direct export, as real processes.

The control plane is this test's live server (its clock the test's); the worker is a
``manage.py export_worker`` process with no database of Conveyor's, exporting a dataset
from PostgreSQL whose table the test holds locked, so that the export's query waits on
the server for as long as the test likes. An operator's cancel and the maximum duration
each stop that query within seconds and leave no partial file; with a claim timeout of
40 s, the worker's heartbeats keep a live export's claim (none is reset and run twice).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from exports import reconcile, services
from exports.models import ExportConfig, ExportJob, JobStatus, SnapshotStatus
from jobs.testing import wait_until
from tests.support.base import staff, tenant
from tests.support.exports.builders import mapping
from tests.support.exports.worker_process import start_export_worker
from tests.support.processes import database_url

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]
TOKEN = "d" * 40
BARS = [{"kind": "node", "name": "bars", "dataset": "daily_bars", "columns": ["ts_code", "close"]}]


@pytest.fixture
def control_plane(settings, tmp_path):
    settings.EXPORTS_WORKER_TOKEN = TOKEN
    settings.EXPORTS_STORAGE_URL = str(tmp_path / "exports")
    return settings


@pytest.fixture
def locked_bars():
    """The dataset's table, locked by another session until the test ends."""
    with psycopg.connect(database_url()) as holder:
        holder.execute("LOCK TABLE ingest_dailybar IN ACCESS EXCLUSIVE MODE")
        yield holder
        holder.rollback()


def export_worker(processes, live_server, settings):
    env = processes.env(
        DATABASE_URL="postgresql://nobody@127.0.0.1:1/nowhere",
        EXPORTS_POSTGRES_URL=database_url(),
        EXPORTS_STORAGE_URL=settings.EXPORTS_STORAGE_URL,
        EXPORTS_WORKER_TOKEN=TOKEN,
        DIRECT_EXPORT="true",
    )
    return start_export_worker(processes, live_server.url, "pod-a", env)


def waiting_export_queries() -> int:
    """The export's statements on the server (waiting for the lock, or running)."""
    with psycopg.connect(database_url()) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%ingest_dailybar%' "
            "AND query NOT LIKE 'LOCK TABLE%'"
        ).fetchone()[0]


def started(snapshot) -> ExportJob:
    """Once the worker holds the job and its query waits on the locked table."""
    job = wait_until(
        lambda: (found := ExportJob.objects.get(snapshot=snapshot)).status == JobStatus.CLAIMED and found,
        30,
        "the worker to claim the job",
    )
    wait_until(lambda: waiting_export_queries() == 1, 30, "the export's query to wait on the lock")
    return job


def stopped_within(seconds: float) -> float:
    began = time.monotonic()
    wait_until(lambda: waiting_export_queries() == 0, seconds, "the export's query to be cancelled")
    return time.monotonic() - began


def no_files_left(job: ExportJob) -> None:
    folder = Path(job.destination)
    assert not folder.exists() or not [p for p in folder.rglob("*") if p.is_file()]


def test_an_operators_cancel_stops_the_running_copy(
    control_plane, processes, live_server, clock, locked_bars
):
    snapshot = services.create_snapshot(mapping(of=tenant("Acme"), entities=BARS))
    worker = export_worker(processes, live_server, control_plane)
    job = started(snapshot)

    services.cancel_snapshot(snapshot, staff("olga", operator=True), via="admin")

    took = stopped_within(12)  # the next heartbeat, at most 5 s away, is refused
    print(f"the cancel stopped the query in {took:.1f} s")
    job.refresh_from_db()
    snapshot.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.error_message == "Cancelled by olga"
    assert snapshot.status == SnapshotStatus.FAILED
    no_files_left(job)
    assert not worker.exited()  # the worker goes on with other jobs


def test_the_maximum_duration_fails_and_stops_a_direct_export(
    control_plane, processes, live_server, clock, locked_bars
):
    ExportConfig.objects.update_or_create(id=1, defaults={"max_duration_seconds": 60})
    snapshot = services.create_snapshot(mapping(of=tenant("Acme"), entities=BARS))
    export_worker(processes, live_server, control_plane)
    job = started(snapshot)

    clock.advance(61)
    assert reconcile.reconcile().timed_out == 1

    stopped_within(12)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.error_message == "Export job exceeded maximum duration (60s)"
    no_files_left(job)


def test_heartbeats_keep_a_live_exports_claim_under_a_40_s_timeout(
    control_plane, processes, live_server, clock, locked_bars
):
    control_plane.EXPORTS_CLAIM_TIMEOUT_SECONDS = 40
    snapshot = services.create_snapshot(mapping(of=tenant("Acme"), entities=BARS))
    export_worker(processes, live_server, control_plane)
    job = started(snapshot)
    claimed_at = job.updated_at

    # Each step is longer than the 40 s timeout would allow without a word; the worker's
    # beat (every 5 s: a third of 40 s, at most 5) comes within each.
    for step in range(1, 4):
        clock.advance(30)
        wait_until(
            lambda step=step: (
                ExportJob.objects.get(pk=job.pk).updated_at == claimed_at + timedelta(seconds=30 * step)
            ),
            12,
            "a heartbeat",
        )
        assert reconcile.reset_stale_claims(clock.now()) == 0
    job.refresh_from_db()
    assert (job.status, job.generation) == (JobStatus.CLAIMED, 1)
    assert waiting_export_queries() == 1  # one session, never a second
