"""Export workers killed at every point of a job's life, as real processes.

The control plane is this test's live server (its clock the test's: polls come due and
claims go stale when the test moves it); the engine is the fake Trino, in this process;
the workers are ``manage.py export_worker`` processes, given a database URL that goes
nowhere, so that any use of Conveyor's database would fail them. Each scenario kills a
worker with SIGKILL where the recovery table says, then lets another worker or the
reconciliation finish: every snapshot ends ready with every row, from one query per
claim, and nothing is written twice.
"""

from __future__ import annotations

import signal
import urllib.error
import urllib.request

import pyarrow as pa
import pytest

from devtools.fakes.trino import FakeTrino
from exports import parquet, reconcile, services
from exports.models import (
    ExportJob,
    JobStatus,
    Mapping,
    MappingEntity,
    Snapshot,
    SnapshotStatus,
    TrinoBinding,
)
from jobs.testing import wait_until
from tests.support.base import tenant
from tests.support.exports.worker_process import start_export_worker

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]
TOKEN = "crash-test-token"
ROWS = 1200


@pytest.fixture
def fake(settings, tmp_path):
    settings.EXPORTS_WORKER_TOKEN = TOKEN
    settings.EXPORTS_STORAGE_URL = str(tmp_path / "exports")
    with FakeTrino(page_rows=500) as server:
        server.load_table(
            "orders",
            pa.table(
                {"id": pa.array(range(ROWS), pa.int64()), "amount": pa.array([n / 4 for n in range(ROWS)])}
            ),
        )
        settings.EXPORTS_TRINO_URL = server.url
        yield server


def snapshot() -> Snapshot:
    owner = tenant("Acme")
    TrinoBinding.objects.create(tenant=owner, role="analytics", catalogs=["lake"])
    mapping = Mapping.objects.create(tenant=owner, name="orders")
    MappingEntity.objects.create(
        mapping=mapping,
        kind="node",
        name="orders",
        catalog="lake",
        sql="SELECT id, amount FROM orders",
        columns=["id", "amount"],
    )
    return services.create_snapshot(mapping)


def worker(processes, live_server, fake: FakeTrino, name: str, *, direct: bool = False, grace: float = 5.0):
    # The worker's export root is the control plane's: an UNLOAD goes only into a job's
    # snapshot folder under it.
    from django.conf import settings

    env = processes.env(
        DATABASE_URL="postgresql://nobody@127.0.0.1:1/nowhere",
        EXPORTS_STORAGE_URL=settings.EXPORTS_STORAGE_URL,
        EXPORTS_WORKER_TOKEN=TOKEN,
        EXPORTS_TRINO_URL=fake.url,
        DIRECT_EXPORT="true" if direct else "false",
    )
    return start_export_worker(processes, live_server.url, name, env, grace=grace)


def job_of(snap: Snapshot) -> ExportJob:
    return ExportJob.objects.get(snapshot=snap)


def status(snap: Snapshot, *wanted: str, timeout: float = 30) -> ExportJob:
    return wait_until(
        lambda: (job := job_of(snap)).status in wanted and job,
        timeout,
        f"the job to be {' or '.join(wanted)}",
    )


def probe(proc, path: str) -> int:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{proc.probes}{path}", timeout=5).status
    except urllib.error.HTTPError as refused:
        return refused.code


def kill(proc) -> None:
    proc.signal(signal.SIGKILL)
    proc.wait(10)


def finished_well(snap: Snapshot, fake: FakeTrino, *, generation: int) -> ExportJob:
    """Ready, every row once, only the final claim's files left, one query per claim."""
    snap.refresh_from_db()
    job = job_of(snap)
    assert snap.status == SnapshotStatus.READY, (snap.status, snap.error)
    assert job.status == JobStatus.COMPLETED and job.row_count == ROWS
    assert job.generation == generation
    assert parquet.count_rows(job.destination).files == job.files
    assert all(f"/g{generation}/" in path for path in job.files)
    assert len(fake.query_by_sql("system.unload")) <= generation
    return job


def test_killed_after_the_claim_before_submitting(processes, live_server, fake, clock):
    snap = snapshot()
    fake.cold_start_queries, fake.cold_start_seconds = 1, 60.0  # the submission hangs
    first = worker(processes, live_server, fake, "worker-a")
    wait_until(lambda: fake.queries, 30, "the submission to reach the engine")
    assert job_of(snap).status == JobStatus.CLAIMED
    kill(first)
    clock.advance(601)  # no word from worker-a for over ten minutes
    assert reconcile.reconcile().claims_reset == 1
    assert job_of(snap).status == JobStatus.PENDING
    worker(processes, live_server, fake, "worker-b")
    status(snap, JobStatus.SUBMITTED)
    clock.advance(2)
    status(snap, JobStatus.COMPLETED)
    job = finished_well(snap, fake, generation=2)
    assert list(job.events.values_list("kind", flat=True)) == [
        "created",
        "claimed",
        "claim_reset",
        "claimed",
        "submitted",
        "completed",
    ]


def test_killed_after_submitting(processes, live_server, fake, clock):
    snap = snapshot()
    fake.hold()
    first = worker(processes, live_server, fake, "worker-a")
    status(snap, JobStatus.SUBMITTED)
    kill(first)
    fake.release()
    worker(processes, live_server, fake, "worker-b")
    clock.advance(2)
    status(snap, JobStatus.COMPLETED)
    finished_well(snap, fake, generation=1)
    assert len(fake.query_by_sql("system.unload")) == 1


def test_killed_while_polling(processes, live_server, fake, clock):
    snap = snapshot()
    fake.hold()
    first = worker(processes, live_server, fake, "worker-a")
    status(snap, JobStatus.SUBMITTED)
    for polls, wait in ((1, 2), (2, 3)):
        clock.advance(wait)
        wait_until(lambda polls=polls: job_of(snap).poll_count == polls, 30, f"poll {polls}")
    kill(first)
    fake.release()
    worker(processes, live_server, fake, "worker-b")
    assert (job_of(snap).next_poll_at - clock.now()).total_seconds() == 5  # the schedule goes on
    clock.advance(5)
    status(snap, JobStatus.COMPLETED)
    job = finished_well(snap, fake, generation=1)
    assert job.poll_count == 2 and len(fake.query_by_sql("system.unload")) == 1


def test_killed_after_the_engine_finished_before_the_jobs_update(processes, live_server, fake, clock):
    snap = snapshot()
    fake.hold()
    first = worker(processes, live_server, fake, "worker-a")
    status(snap, JobStatus.SUBMITTED)
    kill(first)
    fake.release()  # the query finishes on the engine, with no worker left to poll it
    clock.advance(1799)
    assert reconcile.reconcile().checked == 0
    clock.advance(2)  # not updated for 30 minutes: the reconciliation asks the engine
    done = reconcile.reconcile()
    assert done.completed == 1 and done.snapshots_finished == 0  # finished with the job
    job = finished_well(snap, fake, generation=1)
    assert job.events.filter(kind="reconciled").exists()


def test_killed_after_the_job_completed_before_the_snapshot_was_finished(processes, live_server, fake, clock):
    snap = snapshot()
    proc = worker(processes, live_server, fake, "worker-a", direct=True)
    status(snap, JobStatus.COMPLETED)
    proc.signal(signal.SIGTERM)  # its own finalize call must not come after the change below
    assert proc.wait(30) == 0
    # A job's last report finishes its snapshot in the same transaction, so this window
    # does not open here; were it to, the reconciliation's sweep closes it.
    Snapshot.objects.filter(pk=snap.pk).update(status=SnapshotStatus.CREATING, finished_at=None)
    assert reconcile.reconcile().snapshots_finished == 1
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY and snap.node_counts == {"orders": ROWS}


def test_sigterm_hands_back_what_is_running_and_exits_0(processes, live_server, fake):
    snap = snapshot()
    fake.hold()  # a direct export that will not finish
    proc = worker(processes, live_server, fake, "worker-a", direct=True, grace=1.0)
    status(snap, JobStatus.CLAIMED)
    assert probe(proc, "/health") == 200
    wait_until(lambda: probe(proc, "/ready") == 200, 10, "the worker to be ready")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.tail()
    job = job_of(snap)
    assert job.status == JobStatus.PENDING and job.claimed_by == ""
    assert job.events.filter(kind="handed_back").exists()
    fake.release()
