"""Deadlines and cancels reach a running direct export, as real processes.

The control plane is this test's live server (the engine's clock is the test's: an
attempt's time limit and a claim's lease run out when the test moves it, and the test
runs the reaper); the worker is a ``manage.py export_worker`` process with no database
of Conveyor's, exporting a dataset from PostgreSQL whose table the test holds locked, so
that the export's query waits on the server for as long as the test likes. An
operator's cancel and the maximum duration each fail the export and stop that query
within seconds (at the worker's next heartbeat), leaving no partial file; the worker's heartbeats keep a live
export's lease far past its 15 s (the reaper takes nothing, nothing runs twice).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from exports import services
from exports.models import ExportConfig, ExportJob, JobStatus, SnapshotStatus
from jobs import reaper
from jobs.models import Job, JobEvent
from jobs.testing import wait_until
from tests.support.base import staff, tenant
from tests.support.exports.builders import mapping
from tests.support.exports.worker_process import serve_export_workers, start_export_worker, worker_env
from tests.support.processes import database_url

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]
TOKEN = "d" * 40
BARS = [{"kind": "node", "name": "bars", "dataset": "daily_bars", "columns": ["ts_code", "close"]}]
# A heartbeat comes every third of the lease (5 s); a stopped query is gone well within two.
STOPPED_WITHIN = 12


@pytest.fixture
def control_plane(settings, tmp_path):
    serve_export_workers(settings, TOKEN)
    settings.EXPORTS_STORAGE_URL = str(tmp_path / "exports")
    return settings


@pytest.fixture
def locked_bars():
    """The dataset's table, locked by another session until the test ends (after its
    processes are gone: a test names this fixture before ``processes``)."""
    with psycopg.connect(database_url()) as holder:
        holder.execute("LOCK TABLE ingest_dailybar IN ACCESS EXCLUSIVE MODE")
        yield holder
        holder.rollback()


def export_worker(processes, live_server):
    env = worker_env(processes, TOKEN, EXPORTS_POSTGRES_URL=database_url(), DIRECT_EXPORT="true")
    return start_export_worker(processes, live_server.url, "pod-a", env)


def waiting_export_queries() -> int:
    """The export's statements on the server (waiting for the lock, or running)."""
    with psycopg.connect(database_url()) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%ingest_dailybar%' "
            "AND query NOT LIKE 'LOCK TABLE%'"
        ).fetchone()[0]


def started(snapshot, generation: int = 1) -> ExportJob:
    """Once the worker holds the job (its ``generation``-th claim) and its query waits
    on the locked table."""
    job = wait_until(
        lambda: (
            (found := ExportJob.objects.select_related("job").get(snapshot=snapshot)).status
            == JobStatus.CLAIMED
            and found.generation == generation
            and found
        ),
        30,
        f"the worker to claim the job ({generation})",
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
    control_plane, locked_bars, processes, live_server, clock
):
    snapshot = services.create_snapshot(mapping(of=tenant("Acme"), entities=BARS))
    worker = export_worker(processes, live_server)
    job = started(snapshot)

    services.cancel_snapshot(snapshot, staff("olga", operator=True), via="admin")

    took = stopped_within(STOPPED_WITHIN)  # the next heartbeat, at most 5 s away, says so
    print(f"the cancel stopped the query in {took:.1f} s")
    job.refresh_from_db()
    snapshot.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.error_message == "Cancelled by olga"
    assert snapshot.status == SnapshotStatus.FAILED
    assert Job.objects.get(pk=job.job_id).state == Job.State.CANCELLED
    no_files_left(job)
    assert not worker.exited()  # the worker goes on with other jobs
    assert JobEvent.objects.filter(job_id=job.job_id, kind=JobEvent.Kind.CLAIMED).count() == 1


def test_the_maximum_duration_fails_and_stops_a_direct_export(
    control_plane, locked_bars, processes, live_server, clock
):
    ExportConfig.objects.update_or_create(id=1, defaults={"max_duration_seconds": 60})
    snapshot = services.create_snapshot(mapping(of=tenant("Acme"), entities=BARS))
    worker = export_worker(processes, live_server)
    job = started(snapshot)

    # Past the claim's time plus the limit: the worker's next heartbeat is refused.
    clock.advance(61)

    took = stopped_within(STOPPED_WITHIN)
    print(f"the maximum duration stopped the query in {took:.1f} s")
    job.refresh_from_db()
    snapshot.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.error_message == "Export job exceeded maximum duration (60s)"
    assert snapshot.status == SnapshotStatus.FAILED
    # Not tried again: a query that ran this long would run as long the next time.
    engine_job = Job.objects.get(pk=job.job_id)
    assert (engine_job.state, engine_job.attempts) == (Job.State.CANCELLED, 1)
    assert engine_job.error_kind == Job.ErrorKind.TIMEOUT
    no_files_left(job)
    assert not worker.exited()


def test_heartbeats_keep_a_live_exports_lease_past_its_15_s(
    control_plane, locked_bars, processes, live_server, clock
):
    snapshot = services.create_snapshot(mapping(of=tenant("Acme"), entities=BARS))
    export_worker(processes, live_server)
    job = started(snapshot)
    claim = job.job.lease_token

    # Each step leaves the lease 1 s short of running out; the worker's beat (every 5 s)
    # renews it from the new time, or the next step's reaper would take the job back.
    for step in range(1, 5):
        clock.advance(services.LEASE_SECONDS - 1)
        assert reaper.rescue_expired().rescued == 0, f"step {step}: the lease ran out"
        wait_until(
            lambda: Job.objects.get(pk=job.job_id).heartbeat_at == clock.now(),
            STOPPED_WITHIN,
            f"a heartbeat at step {step}",
        )

    engine_job = Job.objects.get(pk=job.job_id)
    assert (engine_job.state, engine_job.attempts, engine_job.lease_token) == (Job.State.RUNNING, 1, claim)
    assert engine_job.lease_expires_at == clock.now() + timedelta(seconds=services.LEASE_SECONDS)
    assert JobEvent.objects.filter(job_id=job.job_id, kind=JobEvent.Kind.CLAIMED).count() == 1
    job.refresh_from_db()
    assert (job.status, job.generation) == (JobStatus.CLAIMED, 1)
    assert waiting_export_queries() == 1  # one session, never a second
