"""The reconciliation, one pass at a time with an injected clock: rows follow what the
engine did where no hook could (an engine job failed or cancelled fails its export; a
claim whose lease the reaper took back is reset; an open export without an engine job
gets one), overlong submissions fail with their engine job and query cancelled, stale
submissions are asked about on Trino by query id, finished snapshots are finished, and
its job does one pass and ends."""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobs
from exports import reconcile, services
from exports.engines.trino import QueryState
from exports.models import (
    EventKind,
    ExportConfig,
    ExportEvent,
    ExportJob,
    JobStatus,
    Snapshot,
    SnapshotStatus,
)
from exports.spec import claim_folder
from jobs import reaper, remote
from jobs.models import Job, JobEvent
from jobs.worker import run_until_idle
from tests.support.exports.builders import (
    CATALOG,
    CREDENTIAL,
    claim_jobs,
    complete,
    jobs_of,
    mapping,
    polled_jobs,
    report,
    snapshot,
    write_part,
)

pytestmark = pytest.mark.django_db


def no_engine():
    raise RuntimeError("no engine in this test")


class FakeTrino:
    """Trino as the reconciliation uses it: asked about a query by its id (each answer in
    turn, the last one again; an exception is raised), and told to cancel one."""

    def __init__(self, *answers: QueryState | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str]] = []
        self.cancelled: list[tuple[str, str]] = []

    def status(self, query_id: str, role: str) -> QueryState:
        self.asked.append((query_id, role))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def cancel(self, query: str, role: str) -> None:
        self.cancelled.append((query, role))

    def engine(self) -> FakeTrino:
        return self


def one_node() -> Snapshot:
    return services.create_snapshot(
        mapping(entities=[{"kind": "node", "name": "entries", "dataset": "data_entries", "columns": ["id"]}])
    )


def trino_export(settings) -> Snapshot:
    """A snapshot of one Trino query, run under the role ``analytics``."""
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    return services.create_snapshot(
        mapping(
            entities=[
                {
                    "kind": "node",
                    "name": "orders",
                    "sql": "SELECT 1 AS id",
                    "catalog": CATALOG,
                    "columns": ["id"],
                }
            ]
        )
    )


def submitted(query_id: str = "q1") -> ExportJob:
    """The one pending export, claimed and its UNLOAD submitted."""
    return report(claim_jobs("w1", 1)[0], "submitted", query_id=query_id, next_uri=f"http://t/{query_id}/1")


def engine_job(row: ExportJob) -> Job:
    return Job.objects.get(pk=row.job_id)


def fresh(row: ExportJob) -> ExportJob:
    return ExportJob.objects.get(pk=row.pk)


def max_duration(seconds: int) -> None:
    config = ExportConfig.current()
    config.max_duration_seconds = seconds
    config.save()


# -- following the engine -----------------------------------------------------------


def test_an_engine_job_the_reaper_failed_behind_the_rows_back_fails_the_export(clock):
    snap = one_node()
    for attempt in (1, 2, 3):  # three claims, each lost with its worker
        [row] = claim_jobs(f"w{attempt}", 1)
        clock.advance(services.LEASE_SECONDS + 1)
        rescued = reaper.rescue_expired()
    assert (rescued.rescued, rescued.failed) == (0, 1)
    # The reaper calls no hook: the row still says claimed.
    assert fresh(row).status == JobStatus.CLAIMED

    done = reconcile.reconcile(engine=no_engine)

    assert (done.failed_with_engine, done.claims_reset) == (1, 0)
    row = fresh(row)
    error = "worker exports/w3 stopped heartbeating; attempts exhausted (3)"
    assert (row.status, row.error_message) == (JobStatus.FAILED, error)
    failed = ExportEvent.objects.get(job_id=row.pk, kind=EventKind.FAILED)
    assert (failed.worker, failed.from_status) == (reconcile.WORKER, JobStatus.CLAIMED)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED and snap.error == f"node entries: {error}"
    assert reconcile.reconcile(engine=no_engine).failed_with_engine == 0  # once


def test_an_engine_job_cancelled_behind_the_rows_back_fails_the_export_and_its_query(settings, clock):
    trino_export(settings)
    row = submitted()
    # Cancelled where no hook could follow (in the database, say).
    Job.objects.filter(pk=row.job_id).update(state=Job.State.CANCELLED, finished_at=clock.now())

    assert reconcile.reconcile(engine=no_engine).failed_with_engine == 1

    row = fresh(row)
    assert (row.status, row.error_message) == (
        JobStatus.FAILED,
        "its engine job was cancelled: no reason given",
    )
    # Its query, left running on Trino, is cancelled there by a job of the tenant's.
    cancel = Job.objects.get(type="exports.CancelQuery")
    assert (cancel.payload, cancel.tenant_id) == ({"job": row.pk}, row.tenant_id)


def test_a_claim_whose_lease_the_reaper_took_back_is_pending_again(clock):
    snapshot()
    quiet, beating = claim_jobs("w1", 2)
    clock.advance(10)
    assert remote.heartbeat(CREDENTIAL, "w1", beating.lease, [beating.job_id]).renewed == [beating.job_id]
    clock.advance(6)  # 16 s since the claim, 6 since the beat
    assert reconcile.reconcile(engine=no_engine).claims_reset == 0  # the engine took nothing back yet
    assert reaper.rescue_expired().rescued == 1

    assert reconcile.reconcile(engine=no_engine).claims_reset == 1

    assert (fresh(quiet).status, fresh(quiet).claimed_by, fresh(quiet).claimed_at) == (
        JobStatus.PENDING,
        "",
        None,
    )
    assert fresh(beating).status == JobStatus.CLAIMED
    reset = ExportEvent.objects.get(job_id=quiet.pk, kind=EventKind.CLAIM_RESET)
    assert (reset.actor, reset.worker) == (None, reconcile.WORKER)
    assert reset.message == (
        "the engine took the claim of exports/w1 back: worker exports/w1 stopped heartbeating"
    )
    assert reconcile.reconcile(engine=no_engine).claims_reset == 0  # once
    with pytest.raises(remote.NotHeld):
        report(quiet, "completed", rows=1, bytes=1, files=["part-g1.parquet"])
    [again] = claim_jobs("w2", 1)
    assert (again.pk, again.generation, again.claimed_by) == (quiet.pk, 2, "exports/w2")


def test_an_open_export_without_an_engine_job_is_given_one(clock):
    snap = snapshot()
    entries = complete(claim_jobs("w1", 1)[0])
    rows = jobs_of(snap)
    # Made before exports ran on the engine: no engine job.
    Job.objects.filter(pk__in=[row.job_id for row in rows]).delete()
    assert not ExportJob.objects.filter(job__isnull=False).exists()

    assert reconcile.reconcile(engine=no_engine).linked == 2

    factors, edge = (fresh(row) for row in rows[1:])
    linked = [engine_job(factors), engine_job(edge)]
    assert [(job.type, job.queue, job.state, job.payload, job.tenant_id) for job in linked] == [
        (services.EXPORT_TYPE, services.QUEUE, Job.State.PENDING, {"export": row.pk}, snap.tenant_id)
        for row in (factors, edge)
    ]
    assert fresh(entries).job_id is None  # a finished export needs none
    assert reconcile.reconcile(engine=no_engine).linked == 0  # once
    # Nodes before edges still.
    assert [row.pk for row in claim_jobs("w2", 5)] == [factors.pk, edge.pk]


# -- submissions --------------------------------------------------------------------


def test_a_submission_past_the_maximum_duration_fails_and_its_engine_job_and_query_are_cancelled(
    settings, clock
):
    snap = trino_export(settings)
    max_duration(600)
    job = submitted()
    for _ in range(13):  # polled all along, and still too long: counted from its submission
        clock.advance((job.next_poll_at - clock.now()).total_seconds())
        [due] = polled_jobs("w1", 1)
        job = report(due, "submitted")
    assert clock.now() - job.submitted_at == timedelta(seconds=590)
    trino = FakeTrino(QueryState("RUNNING"))
    assert reconcile.reconcile(engine=trino.engine).timed_out == 0
    clock.advance(11)

    assert reconcile.reconcile(engine=trino.engine).timed_out == 1

    row = fresh(job)
    message = "Export job exceeded maximum duration (600s)"
    assert (row.status, row.error_message) == (JobStatus.FAILED, message)
    assert trino.cancelled == [("q1", "analytics")] and trino.asked == []
    assert engine_job(row).state == Job.State.CANCELLED
    cancelled = JobEvent.objects.get(job_id=row.job_id, kind="cancelled")
    assert cancelled.via == "reconciliation" and message in cancelled.message
    assert polled_jobs("w1", 5) == []  # no worker polls it again
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED and snap.error == f"node orders: {message}"
    assert reconcile.reconcile(engine=trino.engine).timed_out == 0  # once


def test_a_submission_past_the_maximum_duration_fails_even_if_trino_cannot_cancel_its_query(settings, clock):
    trino_export(settings)
    max_duration(600)
    job = submitted()
    clock.advance(601)

    class Unreachable(FakeTrino):
        def cancel(self, query: str, role: str) -> None:
            raise ConnectionError("trino is down")

    assert reconcile.reconcile(engine=Unreachable(QueryState("RUNNING")).engine).timed_out == 1
    assert fresh(job).status == JobStatus.FAILED
    assert engine_job(job).state == Job.State.CANCELLED


@pytest.fixture
def stale(settings, tmp_path, clock):
    """A Trino export submitted at T0, and nobody polls it: asked about after 300 s."""
    settings.EXPORTS_STORAGE_URL = str(tmp_path)
    settings.EXPORTS_STALE_SUBMITTED_SECONDS = 300
    trino_export(settings)
    return submitted()


def test_a_stale_submission_trino_says_finished_is_completed_from_its_files(stale, clock):
    # Trino wrote the UNLOAD's files into the claim's folder.
    written = write_part(claim_folder(stale.destination, stale.generation), "20261127_q1-0.parquet", rows=7)
    trino = FakeTrino(QueryState("FINISHED"))
    clock.advance(299)
    assert reconcile.reconcile(engine=trino.engine).checked == 0 and trino.asked == []
    clock.advance(2)

    done = reconcile.reconcile(engine=trino.engine)

    assert (done.checked, done.completed, done.failed, done.snapshots_finished) == (1, 1, 0, 0)
    assert trino.asked == [("q1", "analytics")]
    row = fresh(stale)
    assert (row.status, row.row_count, row.size_bytes, row.files) == (
        JobStatus.COMPLETED,
        7,
        written.size,
        written.files,
    )
    note = ExportEvent.objects.get(job_id=row.pk, kind=EventKind.RECONCILED)
    assert (note.worker, note.message) == (reconcile.WORKER, "the engine says query q1 finished")
    # Nothing left for a worker: its engine job ends, and no one polls it again.
    assert engine_job(row).state == Job.State.CANCELLED
    assert polled_jobs("w1", 5) == []
    snapshot_of = Snapshot.objects.get(pk=row.snapshot_id)
    assert snapshot_of.status == SnapshotStatus.READY and snapshot_of.node_counts == {"orders": 7}


def test_a_stale_submission_trino_says_failed_fails(stale, clock):
    missing = "TABLE_NOT_FOUND: line 1:15: Table 'lake.s.orders' does not exist"
    trino = FakeTrino(QueryState("FAILED", error=missing))
    clock.advance(301)

    done = reconcile.reconcile(engine=trino.engine)

    assert (done.checked, done.completed, done.failed) == (1, 0, 1)
    row = fresh(stale)
    assert (row.status, row.error_message) == (JobStatus.FAILED, missing)
    assert engine_job(row).state == Job.State.CANCELLED
    assert Snapshot.objects.get(pk=row.snapshot_id).status == SnapshotStatus.FAILED


@pytest.mark.parametrize(
    "answer, said",
    [
        (QueryState("RUNNING"), "the engine says query q1 is RUNNING"),
        (
            ConnectionError("connection refused"),
            "could not ask the engine about query q1: connection refused",
        ),
    ],
)
def test_a_stale_submission_still_running_or_unanswered_is_left_to_its_next_poll(stale, clock, answer, said):
    trino = FakeTrino(answer)
    clock.advance(301)

    assert reconcile.reconcile(engine=trino.engine).checked == 1

    row = fresh(stale)
    assert (row.status, row.query_id) == (JobStatus.SUBMITTED, "q1")
    assert ExportEvent.objects.get(job_id=row.pk, kind=EventKind.RECONCILED).message == said
    # Asked again only after another quiet spell, not on every pass.
    clock.advance(299)
    reconcile.reconcile(engine=trino.engine)
    assert len(trino.asked) == 1
    clock.advance(2)
    reconcile.reconcile(engine=trino.engine)
    assert len(trino.asked) == 2
    # A worker may still poll it.
    assert [due.pk for due in polled_jobs("w1", 5)] == [row.pk]


# -- snapshots, and the job ---------------------------------------------------------


def test_a_snapshot_left_creating_with_every_job_done_is_finished(clock):
    snap = snapshot()
    for job in claim_jobs("w1", 3):
        complete(job)
    # As if a crash had come between the last job's report and the snapshot's update.
    Snapshot.objects.filter(pk=snap.pk).update(status=SnapshotStatus.CREATING, finished_at=None)
    assert reconcile.reconcile(engine=no_engine).snapshots_finished == 1
    assert Snapshot.objects.get(pk=snap.pk).status == SnapshotStatus.READY
    assert reconcile.reconcile(engine=no_engine).snapshots_finished == 0


def test_the_reconciliation_job_does_one_pass_and_ends(clock):
    snap = snapshot()
    for job in claim_jobs("w1", 3):
        complete(job)
    Snapshot.objects.filter(pk=snap.pk).update(status=SnapshotStatus.CREATING, finished_at=None)
    job = jobs.enqueue("exports.Reconcile", {})

    assert run_until_idle() == 1

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert job.result == {
        "failed_with_engine": 0,
        "claims_reset": 0,
        "linked": 0,
        "timed_out": 0,
        "checked": 0,
        "completed": 0,
        "failed": 0,
        "snapshots_finished": 1,
    }
    assert Snapshot.objects.get(pk=snap.pk).status == SnapshotStatus.READY
