"""The export jobs' state machine: snapshots from mappings, claims, reports fenced by the
claim, the Fibonacci poll schedule, and snapshots finishing with their last job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from hypothesis import given
from hypothesis import strategies as st

from exports import services
from exports.models import EventKind, ExportJob, JobStatus, MappingEntity, SnapshotStatus
from tests.exports.builders import complete, jobs_of, mapping, snapshot

pytestmark = pytest.mark.django_db


def test_a_snapshot_has_one_job_per_entity_nodes_first():
    snap = snapshot()
    made = jobs_of(snap)
    assert [(job.job_type, job.entity_name) for job in made] == [
        ("node", "entries"), ("node", "factors"), ("edge", "computed_with")]
    entries = made[0]
    assert entries.engine == "postgres" and entries.starburst_role == "analytics"
    assert entries.column_names == ["id", "quantity", "classification", "created_at"]
    assert entries.column_types == ["bigint", "decimal(18,6)", "json", "timestamp(6) with time zone"]
    # The tenant filter is written in, from the snapshot's tenant, not from any input.
    assert f"u.tenant_id = {snap.tenant_id}" in entries.sql
    assert entries.destination.endswith(f"tenant-{snap.tenant_id}/snapshot-{snap.pk}/nodes/entries")
    assert snap.status == SnapshotStatus.PENDING


def test_a_mapping_naming_an_unknown_dataset_or_column_is_refused_whole():
    bad = mapping(entities=[{"kind": "node", "name": "x", "dataset": "payroll", "columns": ["id"]}])
    with pytest.raises(services.InvalidMapping, match="node x: no dataset 'payroll'"):
        services.create_snapshot(bad)
    bad = mapping("m2", entities=[{"kind": "node", "name": "u", "dataset": "units",
                                   "columns": ["id", "password"]}])
    with pytest.raises(services.InvalidMapping, match="node u: dataset units has no column 'password'"):
        services.create_snapshot(bad)
    assert not ExportJob.objects.exists()


def test_a_query_entity_needs_trino(settings):
    settings.EXPORTS_TRINO_URL = ""
    query = mapping(entities=[{"kind": "node", "name": "orders", "sql": "SELECT 1 AS id ;\n",
                               "columns": ["id"]}])
    with pytest.raises(services.InvalidMapping, match="no Trino is configured"):
        services.create_snapshot(query)
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    job = jobs_of(services.create_snapshot(query))[0]
    assert job.engine == "trino"
    assert job.sql == 'SELECT "id" FROM (SELECT 1 AS id) AS entity'


def test_an_entity_is_a_dataset_or_a_query_in_the_database():
    owner = mapping(entities=[])
    with pytest.raises(IntegrityError), transaction.atomic():
        MappingEntity.objects.create(mapping=owner, kind="node", name="both", dataset="units",
                                     sql="SELECT 1", columns=["id"])
    with pytest.raises(IntegrityError), transaction.atomic():
        MappingEntity.objects.create(mapping=owner, kind="node", name="../up", dataset="units",
                                     columns=["id"])


def test_claims_take_oldest_snapshot_first_and_never_twice():
    first, second = snapshot(), snapshot(name="other")
    taken = services.claim("w1", 4)
    assert [job.snapshot_id for job in taken] == [first.pk] * 3 + [second.pk]
    assert all(job.status == JobStatus.CLAIMED and job.generation == 1 for job in taken)
    rest = services.claim("w2", 10)
    assert len(rest) == 2 and not {job.pk for job in rest} & {job.pk for job in taken}
    first.refresh_from_db()
    assert first.status == SnapshotStatus.CREATING
    assert services.claim("w3", 10) == []


def test_a_report_from_a_reset_claim_is_refused_and_recorded(clock):
    snap = snapshot()
    job = services.claim("w1", 1)[0]
    clock.advance(601)
    from exports import reconcile

    assert reconcile.reset_stale_claims(clock.now()) == 1
    again = services.claim("w2", 1)[0]
    assert again.pk == job.pk and again.generation == 2
    with pytest.raises(services.ClaimLost):
        services.report(job.pk, services.Report("submitted", 1, worker="w1", query_id="q-late"))
    job.refresh_from_db()
    assert job.status == JobStatus.CLAIMED and job.claimed_by == "w2" and job.query_id == ""
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds == [EventKind.CREATED, EventKind.CLAIMED, EventKind.CLAIM_RESET,
                     EventKind.CLAIMED, EventKind.LATE_REFUSED]
    assert snap.jobs.count() == 3


def test_polls_follow_the_fibonacci_table_kept_in_the_row(clock):
    snapshot()
    job = services.claim("w1", 1)[0]
    job = services.report(job.pk, services.Report("submitted", 1, worker="w1", query_id="q1",
                                                  next_uri="http://t/v1/statement/q1/1"))
    waits = []
    for _ in range(11):
        waits.append(round((job.next_poll_at - clock.now()).total_seconds()))
        clock.advance(waits[-1])
        due = services.due_for_poll("w1", 50)
        assert [d.pk for d in due] == [job.pk]
        # Taken for a poll: no one else gets it meanwhile.
        assert services.due_for_poll("w2", 50) == []
        job = services.report(job.pk, services.Report("submitted", 1, worker="w1",
                                                      poll_count=due[0].poll_count))
    assert waits == [2, 3, 5, 8, 13, 21, 34, 55, 89, 90, 90]
    assert job.poll_count == 11


@given(st.integers(min_value=0, max_value=10_000))
def test_a_poll_delay_is_the_tables_next_entry_capped_at_90(polls):
    table = [2, 3, 5, 8, 13, 21, 34, 55, 89, 90]
    assert services.poll_delay(polls) == timedelta(seconds=table[min(polls, 9)])


def test_a_poll_result_from_a_poll_someone_else_made_since_is_refused(clock):
    snapshot()
    job = services.claim("w1", 1)[0]
    services.report(job.pk, services.Report("submitted", 1, worker="w1", query_id="q1"))
    services.report(job.pk, services.Report("submitted", 1, worker="w2", poll_count=0))
    with pytest.raises(services.ClaimLost):
        services.report(job.pk, services.Report("submitted", 1, worker="w1", poll_count=0))
    assert ExportJob.objects.get(pk=job.pk).poll_count == 1


def test_the_last_job_finishes_its_snapshot_ready_with_counts():
    snap = snapshot()
    taken = services.claim("w1", 3)
    for rows, job in zip((5, 7, 9), taken, strict=True):
        complete(job, rows=rows, size=1000)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY and snap.finished_at is not None
    assert snap.node_counts == {"entries": 5, "factors": 7}
    assert snap.edge_counts == {"computed_with": 9}
    assert snap.size_bytes == 3000


def test_a_failed_job_fails_its_snapshot_with_the_first_error_once_all_are_done():
    snap = snapshot()
    first, second, third = services.claim("w1", 3)
    services.report(second.pk, services.Report("failed", 1, worker="w1", error_message="disk full"))
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING  # two jobs still run
    complete(first)
    complete(third)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED
    assert snap.error == "node factors: disk full"


def test_a_report_that_is_no_transition_is_refused():
    snapshot()
    job = services.claim("w1", 1)[0]
    with pytest.raises(services.InvalidReport):
        services.report(job.pk, services.Report("completed", 1, worker="w1"))
    with pytest.raises(services.InvalidReport):
        services.report(job.pk, services.Report("ready", 1, worker="w1"))
    with pytest.raises(services.InvalidReport):
        services.report(job.pk, services.Report("submitted", 1, worker="w1"))


def test_a_handed_back_job_is_pending_again_and_its_old_claim_refused():
    snapshot()
    job = services.claim("w1", 1)[0]
    services.report(job.pk, services.Report("pending", 1, worker="w1"))
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.claimed_by == ""
    with pytest.raises(services.ClaimLost):
        complete(ExportJob(pk=job.pk, generation=1, claimed_by="w1", destination="x"))


def test_a_fallback_from_a_submitted_job_is_a_new_claim():
    snapshot()
    job = services.claim("w1", 1)[0]
    services.report(job.pk, services.Report("submitted", 1, worker="w1", query_id="q1"))
    taken = services.report(job.pk, services.Report("claimed", 1, worker="w2", poll_count=0,
                                                    note="system.unload is missing"))
    assert taken.status == JobStatus.CLAIMED and taken.generation == 2 and taken.query_id == ""
    # Another poller of the same submission comes too late.
    with pytest.raises(services.ClaimLost):
        services.report(job.pk, services.Report("claimed", 1, worker="w3", poll_count=0))
    kinds = list(taken.events.values_list("kind", flat=True))
    assert EventKind.FELL_BACK in kinds


def test_operator_actions_are_recorded_with_who(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    snap = snapshot()
    first, second, _ = services.claim("w1", 3)
    services.report(first.pk, services.Report("failed", 1, worker="w1", error_message="boom"))
    with pytest.raises(services.ActionRefused, match="only a failed job"):
        services.retry_job(second, alice)
    retried = services.retry_job(first, alice)
    assert retried.status == JobStatus.PENDING and retried.error_message == ""
    reset = services.reset_claim(second, alice)
    assert reset.status == JobStatus.PENDING
    cancelled = services.cancel_snapshot(snap, alice)
    assert len(cancelled) == 3
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED and snap.error.endswith("Cancelled by alice")
    by_alice = set(first.events.filter(actor=alice).values_list("kind", flat=True))
    assert by_alice == {EventKind.RETRIED, EventKind.CANCELLED}
