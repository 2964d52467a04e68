"""Export workers killed at every point of a job's life, as real processes.

The control plane is this test's live server (its clock the test's: polls come due and
leases run out when the test moves it; the test runs the engine's reaper and the
reconciliation itself, as the cluster does); the engine is the fake Trino, in this
process; the workers are ``manage.py export_worker`` processes, remote workers of the
engine with a database URL that goes nowhere. Each scenario kills a worker with SIGKILL
where the recovery table says, then lets the reaper, another worker or the
reconciliation finish: every snapshot ends ready with every row, from one query per
claim, its folder sealed (the manifest, and only the final claim's files), and nothing
is written twice.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path

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
from exports.spec import claim_folder
from jobs import reaper
from jobs.models import Job, JobEvent
from jobs.testing import wait_until
from tests.support.base import tenant
from tests.support.exports.worker_process import serve_export_workers, start_export_worker, worker_env

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]
TOKEN = "c" * 40
ROWS = 1200
# Past an export claim's lease (15 s): a worker that stopped beating has lost it.
PAST_THE_LEASE = services.LEASE_SECONDS + 1


@pytest.fixture
def fake(settings, tmp_path):
    serve_export_workers(settings, TOKEN)
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
    mode = "true" if direct else "false"
    env = worker_env(processes, TOKEN, EXPORTS_TRINO_URL=fake.url, DIRECT_EXPORT=mode)
    return start_export_worker(processes, live_server.url, name, env, grace=grace)


def job_of(snap: Snapshot) -> ExportJob:
    return ExportJob.objects.select_related("job").get(snapshot=snap)


def status(snap: Snapshot, *wanted: str, timeout: float = 30) -> ExportJob:
    return wait_until(
        lambda: (job := job_of(snap)).status in wanted and job,
        timeout,
        f"the job to be {' or '.join(wanted)}",
    )


def direct_queries(fake: FakeTrino) -> list:
    return [q for q in fake.query_by_sql("orders") if "system.unload" not in q.sql]


def probe(proc, path: str) -> int:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{proc.probes}{path}", timeout=5).status
    except urllib.error.HTTPError as refused:
        return refused.code


def kill(proc) -> None:
    proc.signal(signal.SIGKILL)
    proc.wait(10)


def rescued_by_the_reaper(clock) -> None:
    """The killed worker beats no more: past its lease, the reaper takes the job back."""
    clock.advance(PAST_THE_LEASE)
    assert reaper.rescue_expired().rescued == 1


def files_under(folder: str) -> set[str]:
    return {str(path) for path in Path(folder).rglob("*") if path.is_file()}


def finished_well(
    snap: Snapshot, fake: FakeTrino, *, generation: int, engine: str = Job.State.SUCCEEDED
) -> ExportJob:
    """Ready, every row once, one query per claim; the folder sealed: the manifest and
    the final claim's files, nothing else (no partial file, no file of a lost claim);
    the engine job ended as ``engine`` says."""
    snap.refresh_from_db()
    job = job_of(snap)
    assert snap.status == SnapshotStatus.READY, (snap.status, snap.error)
    assert job.status == JobStatus.COMPLETED and job.row_count == ROWS
    assert job.generation == generation
    assert job.job.state == engine, (job.job.state, job.job.last_error)
    assert job.files and all(
        f"/g{generation}/" in path or path.endswith(f"/part-g{generation}.parquet") for path in job.files
    )
    assert parquet.count_rows(job.destination).rows == ROWS
    folder = services.folder_of_snapshot(job)
    assert files_under(folder) == {*job.files, f"{folder}/{parquet.MANIFEST}"}
    manifest = json.loads(Path(folder, parquet.MANIFEST).read_text())
    assert [(e["name"], e["rows"], e["files"]) for e in manifest["entities"]] == [
        ("orders", ROWS, services.shown_files(job))
    ]
    assert len(fake.query_by_sql("system.unload")) <= generation
    return job


def engine_history(job: ExportJob) -> list[tuple[str, str]]:
    return list(JobEvent.objects.filter(job_id=job.job_id).order_by("id").values_list("kind", "worker"))


def test_killed_after_the_claim_before_submitting(processes, live_server, fake, clock):
    snap = snapshot()
    # The submission hangs (a cold cluster), but Trino has it: once let go, the lost
    # claim's UNLOAD writes its files into that claim's folder, which no report names.
    fake.cold_start_queries, fake.cold_start_seconds = 1, 60.0
    fake.hold()
    first = worker(processes, live_server, fake, "worker-a")
    wait_until(lambda: fake.queries, 30, "the submission to reach the engine")
    assert job_of(snap).status == JobStatus.CLAIMED
    kill(first)
    fake.release()
    lost = job_of(snap)
    assert parquet.count_rows(claim_folder(lost.destination, 1)).rows == ROWS  # an orphan

    rescued_by_the_reaper(clock)
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
    assert engine_history(job)[:3] == [
        (JobEvent.Kind.CLAIMED, "exports/worker-a"),
        (JobEvent.Kind.RESCUED, ""),
        (JobEvent.Kind.CLAIMED, "exports/worker-b"),
    ]


def test_killed_while_exporting_directly(processes, live_server, fake, clock):
    snap = snapshot()
    fake.hold()  # the direct export's query runs and runs
    first = worker(processes, live_server, fake, "worker-a", direct=True)
    status(snap, JobStatus.CLAIMED)
    wait_until(lambda: direct_queries(fake), 30, "the export's query to reach the engine")
    kill(first)
    fake.release()

    # No reconciliation: the next claim finds the lost one and starts a new one.
    rescued_by_the_reaper(clock)
    worker(processes, live_server, fake, "worker-b", direct=True)
    status(snap, JobStatus.COMPLETED)
    job = finished_well(snap, fake, generation=2)
    assert [Path(path).name for path in job.files] == ["part-g2.parquet"]
    assert len(direct_queries(fake)) == 2  # one per claim: run to its end once
    assert job.job.attempts == 2
    assert list(job.events.values_list("kind", flat=True)) == ["created", "claimed", "claimed", "completed"]
    assert "the claim of exports/worker-a was lost" in job.events.filter(kind="claimed").last().message
    assert engine_history(job) == [
        (JobEvent.Kind.CLAIMED, "exports/worker-a"),
        (JobEvent.Kind.RESCUED, ""),
        (JobEvent.Kind.CLAIMED, "exports/worker-b"),
        (JobEvent.Kind.SUCCEEDED, "exports/worker-b"),
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
    job = job_of(snap)
    assert (job.next_poll_at - clock.now()).total_seconds() == 5  # the schedule goes on
    assert job.job.run_after == job.next_poll_at
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
    # Its engine job, asleep until a poll no worker will make, ends with it.
    job = finished_well(snap, fake, generation=1, engine=Job.State.CANCELLED)
    assert job.events.filter(kind="reconciled").exists()


def test_killed_after_the_job_completed_before_the_snapshot_was_finished(processes, live_server, fake, clock):
    snap = snapshot()
    proc = worker(processes, live_server, fake, "worker-a", direct=True)
    status(snap, JobStatus.COMPLETED)
    proc.signal(signal.SIGTERM)  # its own last call must not come after the change below
    assert proc.wait(30) == 0
    # A job's last report finishes its snapshot in the same transaction, so this window
    # does not open here; were it to, the reconciliation's sweep closes it.
    Snapshot.objects.filter(pk=snap.pk).update(status=SnapshotStatus.CREATING, finished_at=None)
    assert reconcile.reconcile().snapshots_finished == 1
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY and snap.node_counts == {"orders": ROWS}
    finished_well(snap, fake, generation=1)


def test_sigterm_hands_back_what_is_running_and_exits_0(processes, live_server, fake, clock):
    snap = snapshot()
    fake.hold()  # a direct export that will not finish
    proc = worker(processes, live_server, fake, "worker-a", direct=True, grace=1.0)
    status(snap, JobStatus.CLAIMED)
    wait_until(lambda: direct_queries(fake), 30, "the export's query to reach the engine")
    assert probe(proc, "/health") == 200
    wait_until(lambda: probe(proc, "/ready") == 200, 10, "the worker to be ready")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.tail()

    job = job_of(snap)
    # Handed back to the engine with its attempt given back, its query cancelled.
    assert (job.job.state, job.job.attempts) == (Job.State.PENDING, 0)
    assert engine_history(job)[-1] == (JobEvent.Kind.RELEASED, "exports/worker-a")
    assert [q.state for q in direct_queries(fake)] == ["FAILED"]
    # The row followed in the hand-back's transaction: nothing is left for the
    # reconciliation.
    assert job.status == JobStatus.PENDING and job.claimed_by == ""
    assert job.events.filter(kind="handed_back").exists()
    assert reconcile.reconcile().claims_reset == 0

    fake.release()
    worker(processes, live_server, fake, "worker-b", direct=True)
    status(snap, JobStatus.COMPLETED)
    job = finished_well(snap, fake, generation=2)
    assert job.job.attempts == 1
