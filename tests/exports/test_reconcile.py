"""The reconciliation with an injected clock: stale claims go back to pending (and are
counted), overlong submissions fail with the seed's message, finished snapshots are
finished, and its job ends at once when the worker is stopping."""

from __future__ import annotations

import threading

import pytest

import jobs
from exports import reconcile, services
from exports.handlers import reconcile_exports
from exports.models import EventKind, ExportConfig, ExportEvent, JobStatus, Snapshot, SnapshotStatus
from tests.support.exports.builders import claim_jobs, complete, report, snapshot

pytestmark = pytest.mark.django_db


def no_engine():
    raise RuntimeError("no engine in this test")


def test_a_claim_quiet_for_ten_minutes_goes_back_to_pending(clock):
    snapshot()
    quiet, beating = claim_jobs("w1", 2)
    clock.advance(300)
    services.heartbeat(beating.pk, beating.generation, "w1", beating.token)
    clock.advance(299)
    assert reconcile.reconcile(engine=no_engine).claims_reset == 0
    clock.advance(2)  # 601 s since the claim
    assert reconcile.reconcile(engine=no_engine).claims_reset == 1
    quiet.refresh_from_db()
    beating.refresh_from_db()
    assert quiet.status == JobStatus.PENDING and quiet.claimed_by == ""
    assert beating.status == JobStatus.CLAIMED
    reset = ExportEvent.objects.get(job=quiet, kind=EventKind.CLAIM_RESET)
    assert reset.actor is None and "no word from w1 for 601 s" in reset.message


def test_a_submission_past_the_maximum_duration_fails(clock):
    snap = snapshot()
    job = claim_jobs("w1", 1)[0]
    report(job, "submitted", query_id="q1")
    config = ExportConfig.current()
    config.max_duration_seconds = 600
    config.save()
    for _ in range(10):  # polled all along: still too long
        clock.advance(59)
        report(job, "submitted", poll_count=job.__class__.objects.get(pk=job.pk).poll_count)
    assert reconcile.reconcile(engine=no_engine).timed_out == 0
    clock.advance(11)
    assert reconcile.reconcile(engine=no_engine).timed_out == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.error_message == "Export job exceeded maximum duration (600s)"
    assert Snapshot.objects.get(pk=snap.pk).status == SnapshotStatus.CREATING  # two jobs left


def test_a_snapshot_left_creating_with_every_job_done_is_finished(clock):
    snap = snapshot()
    for job in claim_jobs("w1", 3):
        complete(job)
    # As if a crash had come between the last job's report and the snapshot's update.
    Snapshot.objects.filter(pk=snap.pk).update(status=SnapshotStatus.CREATING, finished_at=None)
    assert reconcile.reconcile(engine=no_engine).snapshots_finished == 1
    assert Snapshot.objects.get(pk=snap.pk).status == SnapshotStatus.READY


def test_the_reconciliation_job_ends_when_its_worker_stops(clock):
    stopping = threading.Event()
    stopping.set()
    job = jobs.enqueue("exports.Reconcile", {})
    ctx = jobs.JobContext(job=job, clock=clock, stopping=stopping)
    assert reconcile_exports(ctx)["passes"] == 1
