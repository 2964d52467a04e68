"""The operators' maximum duration is an export's time limit in the engine: the first
heartbeat past it fails the export for good (not another attempt of an hour), tells
its worker to stop, and fails the snapshot with the limit's words."""

from __future__ import annotations

import pytest

from exports.models import ExportConfig, JobStatus, SnapshotStatus
from jobs import remote
from jobs.models import Job
from tests.support.exports import builders

pytestmark = pytest.mark.django_db


def test_an_export_past_the_maximum_duration_fails_for_good_and_its_worker_is_told(clock, acme):
    ExportConfig.objects.update_or_create(id=1, defaults={"max_duration_seconds": 120})
    snap = builders.snapshot(of=acme)
    first, *_ = builders.claim_jobs("w1", 1)

    clock.advance(119)
    beat = remote.heartbeat(builders.CREDENTIAL, "w1", first.lease, [first.job_id])
    assert beat.renewed == [first.job_id]
    clock.advance(2)
    beat = remote.heartbeat(builders.CREDENTIAL, "w1", first.lease, [first.job_id])

    assert beat.renewed == [] and beat.lost[0]["reason"] == "cancelled"
    first.refresh_from_db()
    assert (first.status, first.error_message) == (
        JobStatus.FAILED,
        "Export job exceeded maximum duration (120s)",
    )
    engine_job = Job.objects.get(pk=first.job_id)
    assert (engine_job.state, engine_job.error_kind) == (Job.State.CANCELLED, Job.ErrorKind.TIMEOUT)
    assert list(engine_job.events.values_list("kind", flat=True))[-2:] == ["retry_scheduled", "cancelled"]
    # The export is not claimed again; its snapshot fails once the others are done.
    assert [row.pk for row in builders.claim_jobs("w2", 10)] == [
        row.pk for row in builders.jobs_of(snap) if row.pk != first.pk
    ]
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING


def test_a_changed_maximum_applies_at_the_next_heartbeat(clock, acme):
    builders.snapshot(of=acme)
    (row,) = builders.claim_jobs("w1", 1)
    clock.advance(300)
    assert remote.heartbeat(builders.CREDENTIAL, "w1", row.lease, [row.job_id]).renewed == [row.job_id]
    ExportConfig.objects.update_or_create(id=1, defaults={"max_duration_seconds": 240})
    assert remote.heartbeat(builders.CREDENTIAL, "w1", row.lease, [row.job_id]).renewed == []
