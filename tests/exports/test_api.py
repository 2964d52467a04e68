"""Exports in the REST API: mappings and datasets to read, snapshots to take, list, read
and cancel, each scoped to the caller's tenant and recorded with its actor; bad input is
a 400 naming what is wrong."""

from __future__ import annotations

from datetime import timedelta

import pytest

from exports import services
from exports.datasets import DATASETS
from exports.models import EventKind, ExportEvent, JobStatus, MappingEntity, Snapshot, SnapshotStatus
from jobs.models import Job, JobEvent
from tests.support.base import as_user, granted, staff
from tests.support.exports.builders import CATALOG, claim_jobs, complete, jobs_of, mapping, report

pytestmark = pytest.mark.django_db

MAPPINGS = "/api/exports/mappings/"
SNAPSHOTS = "/api/exports/snapshots/"


@pytest.fixture
def alice_user(acme):
    return granted(staff("alice", of=acme), "exports.add_snapshot", "exports.operate_snapshot")


@pytest.fixture
def alice(alice_user):
    """Acme staff: reads and writes."""
    return as_user(alice_user)


@pytest.fixture
def bob(acme):
    """An Acme member who is not staff: reads only."""
    return as_user(staff("bob", of=acme, is_staff=False))


@pytest.fixture
def gina(globex):
    """Globex staff."""
    return as_user(granted(staff("gina", of=globex), "exports.add_snapshot", "exports.operate_snapshot"))


@pytest.fixture
def olga():
    """A platform operator."""
    return as_user(granted(staff("olga", operator=True), "exports.add_snapshot", "exports.operate_snapshot"))


# --- mappings and datasets --------------------------------------------------------------------


def test_mappings_are_listed_with_their_entities_for_the_callers_tenant(bob, acme, globex):
    mine = mapping(of=acme)
    mapping("theirs", of=globex)

    listed = bob.get(MAPPINGS).json()["results"]

    assert [m["name"] for m in listed] == ["co2"]
    body = bob.get(f"{MAPPINGS}{mine.pk}/").json()
    assert body["tenant"] == acme.pk and "starburst_role" not in body
    assert [(e["kind"], e["name"], e["dataset"]) for e in body["entities"]] == [
        ("edge", "computed_with", "emissions"),
        ("node", "entries", "data_entries"),
        ("node", "factors", "emission_factors"),
    ]
    assert body["entities"][1]["columns"] == ["id", "quantity", "classification", "created_at"]


def test_mappings_are_read_only(alice, acme):
    owner = mapping(of=acme)

    assert alice.post(MAPPINGS, {"name": "x"}, format="json").status_code == 405
    assert alice.delete(f"{MAPPINGS}{owner.pk}/").status_code == 405


def test_the_datasets_are_listed_with_their_columns_and_types(bob):
    body = bob.get("/api/exports/datasets/").json()

    assert [dataset["name"] for dataset in body] == sorted(DATASETS)
    units = next(dataset for dataset in body if dataset["name"] == "units")
    assert units["columns"][:2] == [{"name": "id", "type": "bigint"}, {"name": "code", "type": "varchar"}]


# --- taking a snapshot ------------------------------------------------------------------------


def test_staff_take_a_snapshot_by_name_and_it_is_recorded_with_them(alice, alice_user, acme):
    mapping(of=acme)

    response = alice.post(SNAPSHOTS, {"mapping": "co2"}, format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    snap = Snapshot.objects.get()
    assert (body["id"], body["mapping_name"], body["status"], body["created_by"]) == (
        snap.pk,
        "co2",
        "pending",
        "alice",
    )
    assert [(job["type"], job["entity"], job["status"]) for job in body["jobs"]] == [
        ("node", "entries", "pending"),
        ("node", "factors", "pending"),
        ("edge", "computed_with", "pending"),
    ]
    # Each runs as an engine job of the exports' queue, named by its id.
    assert [job["engine_job"] for job in body["jobs"]] == [row.job_id for row in jobs_of(snap)]
    engine_jobs = Job.objects.filter(pk__in=[job["engine_job"] for job in body["jobs"]])
    assert {(job.type, job.queue, job.tenant_id, job.state) for job in engine_jobs} == {
        ("exports.export", "exports", acme.pk, Job.State.PENDING)
    }
    assert set(ExportEvent.objects.values_list("kind", "actor")) == {(EventKind.CREATED, alice_user.pk)}


def test_a_snapshot_by_the_mappings_id_runs_under_the_tenants_bound_role(alice, acme, settings):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    owner = mapping(
        of=acme,
        entities=[
            {"kind": "node", "name": "orders", "catalog": CATALOG, "sql": "SELECT 1 AS id", "columns": ["id"]}
        ],
    )

    response = alice.post(SNAPSHOTS, {"mapping": owner.pk}, format="json")

    assert response.status_code == 201
    assert {job.starburst_role for job in jobs_of(Snapshot.objects.get())} == {"analytics"}


def test_the_caller_cannot_choose_the_role(alice, acme, settings):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    owner = mapping(
        of=acme,
        entities=[
            {"kind": "node", "name": "orders", "catalog": CATALOG, "sql": "SELECT 1 AS id", "columns": ["id"]}
        ],
    )
    response = alice.post(SNAPSHOTS, {"mapping": owner.pk, "starburst_role": "role-b"}, format="json")

    assert response.status_code == 400
    assert "bound to the tenant by platform operators" in response.json()["starburst_role"][0]
    assert not Snapshot.objects.exists()


@pytest.mark.parametrize(
    ("sql", "catalog", "message"),
    [
        (
            "SELECT 1 AS id) AS entity), location => 's3://b/tenant-2/x', format => 'PARQUET')) --",
            CATALOG,
            "node orders: not a query Trino's grammar reads",
        ),
        ("SELECT 1 AS id", "hr", "node orders: catalog 'hr' is not one the tenant's binding allows"),
    ],
)
def test_an_entity_the_service_refuses_is_a_400_naming_the_mapping(
    alice, acme, settings, sql, catalog, message
):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    owner = mapping(
        of=acme,
        entities=[{"kind": "node", "name": "orders", "catalog": catalog, "sql": sql, "columns": ["id"]}],
    )

    response = alice.post(SNAPSHOTS, {"mapping": owner.pk}, format="json")

    assert response.status_code == 400
    assert response.json()["mapping"][0].startswith(message)
    assert not Snapshot.objects.exists()


def test_a_tenant_without_a_binding_gets_a_400_for_a_trino_entity(alice, acme, settings):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    owner = mapping(
        of=acme,
        role=None,
        entities=[
            {"kind": "node", "name": "orders", "catalog": CATALOG, "sql": "SELECT 1 AS id", "columns": ["id"]}
        ],
    )

    response = alice.post(SNAPSHOTS, {"mapping": owner.pk}, format="json")

    assert response.status_code == 400
    assert "the tenant has no Trino binding" in response.json()["mapping"][0]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"mapping": "nope"}, "mapping", "unknown mapping 'nope'"),
        ({"mapping": 2**70}, "mapping", "an id is between 1 and"),
        ({"mapping": ["co2"]}, "mapping", "a mapping's id (a number) or name (a string)"),
        ({"mapping": True}, "mapping", "a mapping's id (a number) or name (a string)"),
        ({}, "mapping", "This field is required."),
        ({"mapping": "co2", "role": "x"}, "role", "unknown field"),
        (
            {"mapping": "co2", "starburst_role": "analytics"},
            "starburst_role",
            "unknown field: the Trino role is bound to the tenant by platform operators",
        ),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(alice, acme, body, field, message):
    mapping(of=acme)

    response = alice.post(SNAPSHOTS, body, format="json")

    assert response.status_code == 400
    assert message in response.json()[field][0]
    assert not Snapshot.objects.exists()


def test_a_body_that_is_not_an_object_is_a_400(alice):
    response = alice.post(SNAPSHOTS, ["co2"], format="json")

    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["the body must be a JSON object, got an array"]}


def test_a_mapping_the_service_refuses_is_a_400_saying_why(alice, acme):
    owner = mapping(of=acme, entities=[])
    MappingEntity.objects.create(
        mapping=owner, kind="node", name="u", dataset="units", columns=["id", "password"]
    )

    response = alice.post(SNAPSHOTS, {"mapping": owner.pk}, format="json")

    assert response.status_code == 400
    assert response.json() == {"mapping": ["node u: dataset units has no column 'password'"]}
    assert not Snapshot.objects.exists()


def test_another_tenants_mapping_is_as_unknown_as_a_missing_one(alice, globex):
    theirs = mapping(of=globex)

    for reference in (theirs.pk, theirs.name):
        response = alice.post(SNAPSHOTS, {"mapping": reference}, format="json")
        assert response.status_code == 400
        assert response.json() == {"mapping": [f"unknown mapping {reference!r}"]}
    assert not Snapshot.objects.exists()


def test_a_platform_operator_names_a_mapping_by_its_id(olga, acme):
    owner = mapping(of=acme)

    by_name = olga.post(SNAPSHOTS, {"mapping": "co2"}, format="json")
    by_id = olga.post(SNAPSHOTS, {"mapping": owner.pk}, format="json")

    assert by_name.status_code == 400
    assert "a platform operator names a mapping by its id" in by_name.json()["mapping"][0]
    assert by_id.status_code == 201 and by_id.json()["tenant"] == acme.pk


def test_members_read_but_do_not_take_or_cancel_snapshots(bob, acme):
    snap = services.create_snapshot(mapping(of=acme))

    assert bob.post(SNAPSHOTS, {"mapping": "co2"}, format="json").status_code == 403
    assert bob.post(f"{SNAPSHOTS}{snap.pk}/cancel/").status_code == 403
    assert bob.get(f"{SNAPSHOTS}{snap.pk}/").status_code == 200
    assert Snapshot.objects.count() == 1


# --- reading snapshots ------------------------------------------------------------------------


def test_a_snapshot_shows_each_jobs_status_rows_size_error_poll_and_files(bob, acme, clock):
    snap = services.create_snapshot(mapping(of=acme))
    entries, factors, edges = claim_jobs("w1", 10)
    entries = report(entries, JobStatus.SUBMITTED, query_id="q-1")
    factors = complete(factors, rows=7, size=700)
    report(edges, JobStatus.FAILED, error_message="Trino said no")

    jobs = {job["entity"]: job for job in bob.get(f"{SNAPSHOTS}{snap.pk}/").json()["jobs"]}

    assert jobs["entries"]["status"] == "submitted" and jobs["entries"]["poll_count"] == 0
    assert (jobs["entries"]["claimed_by"], jobs["entries"]["engine_job"]) == ("exports/w1", entries.job_id)
    assert jobs["entries"]["next_poll_at"] == entries.next_poll_at.isoformat().replace("+00:00", "Z")
    assert (jobs["factors"]["row_count"], jobs["factors"]["size_bytes"]) == (7, 700)
    # Inside the snapshot's folder: no server path reaches a member.
    assert jobs["factors"]["files"] == ["nodes/factors/part-g1.parquet"]
    assert (jobs["computed_with"]["status"], jobs["computed_with"]["error"]) == ("failed", "Trino said no")


def test_snapshots_are_filtered_by_status_mapping_and_creation_time(bob, acme, clock):
    first = services.create_snapshot(mapping("first", of=acme))
    clock.advance(3600)
    second = services.create_snapshot(mapping("second", of=acme))
    services.cancel_snapshot(second, None)

    def ids(**query):
        response = bob.get(SNAPSHOTS, query)
        assert response.status_code == 200, response.json()
        return [snap["id"] for snap in response.json()["results"]]

    assert ids() == [second.pk, first.pk]
    assert ids(status="failed") == [second.pk]
    assert ids(status=["failed", "pending"]) == [second.pk, first.pk]
    assert ids(mapping=first.mapping_id) == [first.pk]
    since = (clock.now() - timedelta(minutes=1)).isoformat()
    assert ids(created_after=since) == [second.pk]
    assert ids(created_before=since) == [first.pk]


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ({"status": "done"}, "status"),
        ({"mapping": "co2"}, "mapping"),
        ({"mapping": "1.5"}, "mapping"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2026-01-01T00:00:00+23:00"}, "created_before"),
        ({"stat": "failed"}, "stat"),
        ({"cursor": "abc"}, "cursor"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(bob, query, name):
    response = bob.get(SNAPSHOTS, query)

    assert response.status_code == 400
    assert name in response.json()


def test_another_tenants_snapshot_is_a_404_and_not_listed(alice, gina, acme):
    snap = services.create_snapshot(mapping("secret-mapping", of=acme))

    assert gina.get(f"{SNAPSHOTS}{snap.pk}/").status_code == 404
    assert gina.post(f"{SNAPSHOTS}{snap.pk}/cancel/").status_code == 404
    assert gina.get(f"{MAPPINGS}{snap.mapping_id}/").status_code == 404
    listing = gina.get(SNAPSHOTS).content.decode() + gina.get(MAPPINGS).content.decode()
    assert "secret-mapping" not in listing
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.PENDING
    assert alice.get(f"{SNAPSHOTS}{snap.pk}/").status_code == 200


# --- cancelling -------------------------------------------------------------------------------


def test_staff_cancel_a_snapshot_and_it_is_recorded_with_them(alice, alice_user, acme):
    snap = services.create_snapshot(mapping(of=acme))

    response = alice.post(f"{SNAPSHOTS}{snap.pk}/cancel/")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "failed"
    assert {job["error"] for job in body["jobs"]} == {"Cancelled by alice"}
    cancelled = ExportEvent.objects.filter(kind=EventKind.CANCELLED)
    assert cancelled.count() == 3
    assert {(event.actor, event.via) for event in cancelled} == {(alice_user, "api")}
    # The engine's cancel of each export's job: no worker claims them any more.
    engine_jobs = Job.objects.filter(pk__in=[job["engine_job"] for job in body["jobs"]])
    assert [job.state for job in engine_jobs] == [Job.State.CANCELLED] * 3
    assert {job.events.get(kind=JobEvent.Kind.CANCELLED).actor for job in engine_jobs} == {alice_user}
    assert claim_jobs("w1", 10) == []


def test_staff_without_the_operate_permission_get_403_and_the_snapshot_stays(acme):
    snap = services.create_snapshot(mapping(of=acme))
    carl = as_user(staff("carl", of=acme))

    response = carl.post(f"{SNAPSHOTS}{snap.pk}/cancel/")

    assert response.status_code == 403
    assert "exports.operate_snapshot" in response.json()["detail"]
    snap.refresh_from_db()
    assert snap.status != SnapshotStatus.FAILED
    assert not ExportEvent.objects.filter(kind=EventKind.CANCELLED).exists()


def test_staff_without_the_add_permission_take_no_snapshot_as_in_the_admin(acme):
    """Taking a snapshot needs exports.add_snapshot, as the mapping page's "Take a
    snapshot" does; the operate permission is for acting on one."""
    mapping(of=acme)
    carl = as_user(granted(staff("carl", of=acme), "exports.operate_snapshot"))

    response = carl.post(SNAPSHOTS, {"mapping": "co2"}, format="json")

    assert response.status_code == 403
    assert response.json()["detail"] == "Only staff granted exports.add_snapshot may do this."
    assert not Snapshot.objects.exists()


def test_cancelling_a_finished_snapshot_is_a_409_saying_why(alice, acme):
    snap = services.create_snapshot(mapping(of=acme))
    services.cancel_snapshot(snap, None)

    response = alice.post(f"{SNAPSHOTS}{snap.pk}/cancel/")

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"snapshot {snap.pk} has no unfinished job: it is failed",
        "snapshot": snap.pk,
    }


def test_a_platform_operator_sees_where_the_files_are(olga, acme):
    snap = services.create_snapshot(mapping(of=acme))
    done = complete(claim_jobs("w1", 1)[0])

    jobs = olga.get(f"{SNAPSHOTS}{snap.pk}/").json()["jobs"]

    assert jobs[0]["files"] == done.files and done.files[0].startswith("/")
