from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from console.api import serializers as api_serializers
from jobs import engine
from jobs.events import publish
from jobs.models import Job, JobEvent
from tests.support.base import as_user, claim_one, granted, make_job, run_next, staff

pytestmark = pytest.mark.django_db


def ids(response) -> list[int]:
    assert response.status_code == 200, response.json()
    return [row["id"] for row in response.json()["results"]]


def finished(name: str = "tests.noop", **options: Any) -> Job:
    job = make_job(name, **options)
    run_next()
    job.refresh_from_db()
    return job


# --- listing and filters -----------------------------------------------------------------


def test_the_list_shows_the_callers_tenant_newest_first(clock, alice, acme, globex):
    first, second = make_job(tenant=acme), make_job(tenant=acme)
    make_job(tenant=globex)

    assert ids(alice.get("/api/jobs/")) == [second.pk, first.pk]


def test_a_platform_operator_lists_every_tenant(clock, olga, acme, globex):
    jobs = [make_job(tenant=acme), make_job(tenant=globex), make_job()]

    assert ids(olga.get("/api/jobs/")) == [job.pk for job in reversed(jobs)]


def test_a_user_without_a_tenant_lists_nothing(clock, acme):
    make_job(tenant=acme)

    assert ids(as_user(staff("nemo")).get("/api/jobs/")) == []


def test_a_superuser_without_a_membership_is_an_operator(clock, acme, globex):
    jobs = [make_job(tenant=acme), make_job(tenant=globex)]
    root = User.objects.create_superuser("root", password="pw")

    assert sorted(ids(as_user(root).get("/api/jobs/"))) == [job.pk for job in jobs]


def test_it_filters_by_one_or_several_states(clock, alice, acme):
    failed = finished("tests.permanent", tenant=acme)
    cancelled = engine.cancel(make_job(tenant=acme))
    make_job(tenant=acme)

    assert ids(alice.get("/api/jobs/?state=failed")) == [failed.pk]
    assert ids(alice.get("/api/jobs/?state=failed&state=cancelled")) == [cancelled.pk, failed.pk]


def test_it_filters_by_type_and_queue(clock, alice, acme):
    noop = make_job("tests.noop", tenant=acme)
    other_queue = make_job("tests.noop", queue="bulk", tenant=acme)
    make_job("tests.keyed", tenant=acme)

    assert ids(alice.get("/api/jobs/", {"type": "tests.noop"})) == [other_queue.pk, noop.pk]
    assert ids(alice.get("/api/jobs/", {"queue": "bulk"})) == [other_queue.pk]


def test_it_filters_by_pipeline_and_parent(clock, alice, acme):
    parent = make_job(tenant=acme)
    child = make_job(parent=parent, pipeline=parent.pipeline_id, tenant=acme)
    make_job(tenant=acme)

    assert ids(alice.get("/api/jobs/", {"pipeline": str(parent.pipeline_id)})) == [child.pk, parent.pk]
    assert ids(alice.get("/api/jobs/", {"parent": parent.pk})) == [child.pk]


def test_an_operator_filters_by_tenant(clock, olga, acme, globex):
    make_job(tenant=acme)
    theirs = make_job(tenant=globex)

    assert ids(olga.get("/api/jobs/", {"tenant": globex.pk})) == [theirs.pk]


def test_a_tenant_filter_cannot_widen_a_members_scope(clock, alice, globex):
    make_job(tenant=globex)

    assert ids(alice.get("/api/jobs/", {"tenant": globex.pk})) == []


def test_it_filters_by_creation_time(clock, alice, acme):
    early = make_job(tenant=acme)
    clock.advance(60)
    late = make_job(tenant=acme)
    cut = (early.created_at + timedelta(seconds=30)).isoformat()

    assert ids(alice.get("/api/jobs/", {"created_after": cut})) == [late.pk]
    assert ids(alice.get("/api/jobs/", {"created_before": cut})) == [early.pk]


def test_it_filters_by_finish_time_and_recent_failures(clock, alice, acme):
    old_failure = finished("tests.permanent", tenant=acme)
    clock.advance(3600)
    new_failure = finished("tests.permanent", tenant=acme)
    success = finished("tests.noop", tenant=acme)
    cut = (clock.now() - timedelta(minutes=5)).isoformat()

    assert ids(alice.get("/api/jobs/", {"finished_after": cut})) == [success.pk, new_failure.pk]
    assert ids(alice.get("/api/jobs/", {"finished_before": cut})) == [old_failure.pk]
    assert ids(alice.get("/api/jobs/", {"failed_since": cut})) == [new_failure.pk]


def test_filters_combine(clock, alice, acme):
    make_job("tests.noop", queue="bulk", tenant=acme)
    wanted = finished("tests.permanent", tenant=acme)
    finished("tests.noop", tenant=acme)

    query = {"state": "failed", "type": "tests.permanent", "queue": "default"}
    assert ids(alice.get("/api/jobs/", query)) == [wanted.pk]
    assert ids(alice.get("/api/jobs/", {**query, "queue": "bulk"})) == []


@pytest.mark.parametrize(
    "name, value",
    [
        ("state", "exploded"),
        ("pipeline", "not-a-uuid"),
        ("parent", "abc"),
        ("tenant", "1.5"),
        ("created_after", "yesterday"),
        ("finished_before", "2026-13-45"),
        ("failed_since", "soon"),
    ],
)
def test_a_bad_filter_value_is_a_400_naming_the_parameter(alice, name, value):
    response = alice.get("/api/jobs/", {name: value})

    assert response.status_code == 400
    assert list(response.json()) == [name]
    assert response.json()[name][0]


def test_an_unknown_query_parameter_is_a_400_naming_it(clock, alice, acme):
    make_job(tenant=acme)

    response = alice.get("/api/jobs/", {"stat": "failed", "state": "failed"})

    assert response.status_code == 400
    assert list(response.json()) == ["stat"]
    assert "unknown query parameter" in response.json()["stat"][0]


def test_pagination_ordering_and_format_parameters_are_accepted(clock, alice, acme):
    jobs = [make_job(tenant=acme) for _ in range(3)]

    response = alice.get("/api/jobs/", {"page_size": 2, "ordering": "id", "format": "json"})

    assert ids(response) == [jobs[0].pk, jobs[1].pk]


def test_an_unknown_ordering_is_a_400(alice):
    response = alice.get("/api/jobs/", {"ordering": "payload"})

    assert response.status_code == 400
    assert list(response.json()) == ["ordering"]


def test_cursor_pages_walk_the_whole_list_newest_first(clock, alice, acme):
    jobs = [make_job(tenant=acme) for _ in range(5)]

    seen, url, pages = [], "/api/jobs/?page_size=2", 0
    while url:
        page = alice.get(url)
        seen += ids(page)
        url, pages = page.json()["next"], pages + 1

    assert seen == [job.pk for job in reversed(jobs)]
    assert pages == 3


def test_a_listed_job_shows_progress_and_duration(clock, alice, acme):
    job = make_job("tests.progress", {"steps": 4}, tenant=acme)
    run_next()

    row = alice.get("/api/jobs/").json()["results"][0]

    assert row["id"] == job.pk
    assert row["progress"] == {"done": 4, "total": 4, "message": "step 4", "percent": 100.0}
    assert row["duration_seconds"] == 0.0
    assert row["tenant"] == job.tenant_id


# --- detail --------------------------------------------------------------------------------


def test_the_detail_has_every_field_the_why_line_and_the_history(clock, alice, acme):
    job = finished("tests.noop", payload={"n": 3}, tenant=acme)

    body = alice.get(f"/api/jobs/{job.pk}/").json()

    assert body["state"] == "succeeded"
    assert body["payload"] == {"n": 3}
    assert body["result"] == {"echo": 3}
    assert body["why"] == "finished successfully"
    assert [(e["kind"], e["worker"]) for e in body["history"]] == [
        ("claimed", "test-worker"),
        ("succeeded", "test-worker"),
    ]
    assert body["history_truncated"] is False
    assert "lease_token" not in body
    for name in (
        "attempts",
        "max_attempts",
        "run_after",
        "pipeline",
        "locked_by",
        "lease_expires_at",
        "rescues",
        "last_error",
        "started_at",
        "finished_at",
    ):
        assert name in body


def test_the_detail_explains_why_a_pending_job_waits(clock, alice, acme):
    job = make_job(tenant=acme, run_after=clock.now() + timedelta(minutes=5))

    body = alice.get(f"/api/jobs/{job.pk}/").json()

    assert body["why"].startswith("waiting for run_after (scheduled)")


def test_the_history_names_the_staff_user_who_acted(clock, alice, acme):
    job = make_job(tenant=acme)
    alice.post(f"/api/jobs/{job.pk}/cancel/", {"reason": "duplicate"}, format="json")

    history = alice.get(f"/api/jobs/{job.pk}/").json()["history"]
    assert set(history[-1]) == {
        # The history vocabulary (jobs.History), then the job's own columns.
        *("id", "at", "kind", "from_status", "to_status", "actor", "via", "message", "detail"),
        *("attempt", "progress_done", "progress_total", "worker"),
    }

    assert history[-1]["kind"] == "cancelled"
    assert history[-1]["actor"] == "alice"
    assert history[-1]["message"] == "duplicate"


def test_a_long_history_shows_its_newest_rows(clock, alice, acme, monkeypatch):
    monkeypatch.setattr(api_serializers, "HISTORY_LIMIT", 2)
    job = make_job(tenant=acme)
    for change in (engine.cancel, engine.retry, engine.cancel):
        change(job)

    body = alice.get(f"/api/jobs/{job.pk}/").json()

    assert body["history_truncated"] is True
    assert [e["kind"] for e in body["history"]] == ["retried", "cancelled"]


def test_another_tenants_job_is_a_404_without_its_data(clock, alice, globex):
    job = make_job("tests.noop", {"secret": "globex-plans"}, tenant=globex)

    response = alice.get(f"/api/jobs/{job.pk}/")

    assert response.status_code == 404
    assert "globex-plans" not in response.content.decode()
    assert alice.get(f"/api/jobs/{job.pk + 1000}/").json() == response.json()


# --- enqueue ----------------------------------------------------------------------------------


def test_staff_enqueue_a_job_for_their_tenant(clock, alice, acme):
    response = alice.post(
        "/api/jobs/", {"type": "tests.noop", "payload": {"n": 1}, "priority": 5}, format="json"
    )

    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.type, job.payload, job.priority, job.queue) == ("tests.noop", {"n": 1}, 5, "default")
    assert job.tenant == acme
    assert job.created_by.username == "alice"
    assert job.run_after == clock.now()
    assert response.json()["created_by"] == "alice"


def test_enqueue_accepts_run_after_and_keys(clock, alice):
    later = clock.now() + timedelta(hours=1)
    response = alice.post(
        "/api/jobs/",
        {
            "type": "tests.noop",
            "run_after": later.isoformat(),
            "unique_key": "import-7",
            "concurrency_key": "acme-imports",
        },
        format="json",
    )

    job = Job.objects.get(pk=response.json()["id"])
    assert (job.run_after, job.unique_key, job.concurrency_key) == (later, "import-7", "acme-imports")
    assert job.payload == {}


def test_enqueue_with_a_held_unique_key_answers_the_existing_job(clock, alice):
    body = {"type": "tests.noop", "unique_key": "import-7"}
    first = alice.post("/api/jobs/", body, format="json")
    again = alice.post("/api/jobs/", body, format="json")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1


def test_a_unique_key_held_by_another_tenant_neither_blocks_nor_leaks(clock, alice, globex):
    theirs = make_job("tests.noop", {"secret": "globex"}, unique_key="import-7", tenant=globex)

    response = alice.post("/api/jobs/", {"type": "tests.noop", "unique_key": "import-7"}, format="json")

    assert response.status_code == 201
    assert response.json()["id"] != theirs.pk
    assert "globex" not in response.content.decode()
    assert Job.objects.count() == 2


def test_an_operator_enqueues_for_any_tenant(clock, olga, globex):
    response = olga.post("/api/jobs/", {"type": "tests.noop", "tenant": globex.pk}, format="json")

    assert response.status_code == 201
    assert Job.objects.get().tenant == globex


def test_a_member_cannot_enqueue_for_another_tenant(clock, alice, globex):
    response = alice.post("/api/jobs/", {"type": "tests.noop", "tenant": globex.pk}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["tenant"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"type": "tests.nope"}, "type"),
        ({"type": "tests.noop", "payload": [1, 2]}, "payload"),
        ({"type": "tests.noop", "payload": "text"}, "payload"),
        ({"type": "tests.noop", "priority": 10**6}, "priority"),
        ({"type": "tests.noop", "run_after": "whenever"}, "run_after"),
        ({"type": "tests.noop", "tennant": 1}, "tennant"),
        ({"payload": {}}, "type"),
    ],
)
def test_a_bad_enqueue_is_a_400_naming_the_field_and_writes_nothing(clock, alice, body, field):
    response = alice.post("/api/jobs/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


def test_a_type_that_takes_no_api_payload_cannot_be_enqueued(clock, alice):
    response = alice.post("/api/jobs/", {"type": "tests.record"}, format="json")

    assert response.status_code == 400
    message = response.json()["type"][0]
    assert "'tests.record' cannot be enqueued through the API" in message
    assert "tests.noop" in message  # the types that can are listed
    assert not Job.objects.exists()


def test_the_job_gets_the_payload_serializers_output_not_the_body(clock, alice):
    response = alice.post("/api/jobs/", {"type": "tests.noop", "payload": {"n": "7"}}, format="json")

    assert response.status_code == 201
    assert Job.objects.get().payload == {"n": 7}


def test_a_payload_field_the_type_does_not_know_is_a_400(clock, alice):
    response = alice.post("/api/jobs/", {"type": "tests.noop", "payload": {"path": "/etc"}}, format="json")

    assert response.status_code == 400
    assert response.json() == {"payload": {"path": ["unknown field"]}}
    assert not Job.objects.exists()


def test_only_platform_operators_choose_a_queue(clock, alice, olga):
    refused = alice.post("/api/jobs/", {"type": "tests.noop", "queue": "bulk"}, format="json")
    chosen = olga.post("/api/jobs/", {"type": "tests.noop", "queue": "bulk"}, format="json")

    assert refused.status_code == 400 and list(refused.json()) == ["queue"]
    assert chosen.status_code == 201
    assert Job.objects.get().queue == "bulk"


def test_an_unknown_type_is_named_in_the_error(alice):
    response = alice.post("/api/jobs/", {"type": "tests.nope"}, format="json")

    assert "tests.nope" in response.json()["type"][0]


def test_a_non_staff_member_cannot_enqueue(clock, bob):
    response = bob.post("/api/jobs/", {"type": "tests.noop"}, format="json")

    assert response.status_code == 403
    assert not Job.objects.exists()


def test_a_non_staff_member_cannot_enqueue_even_granted_the_permission(clock, acme):
    member = as_user(granted(staff("bea", of=acme, is_staff=False), "jobs.add_job"))

    response = member.post("/api/jobs/", {"type": "tests.noop"}, format="json")

    assert response.status_code == 403
    assert not Job.objects.exists()


def test_staff_who_may_operate_jobs_but_not_add_them_cannot_enqueue(clock, acme):
    """Enqueueing is adding a job (jobs.add_job); operating one (jobs.operate_job) is
    recovering, retrying, cancelling or running an existing one."""
    carl = as_user(granted(staff("carl", of=acme), "jobs.operate_job"))

    response = carl.post("/api/jobs/", {"type": "tests.noop"}, format="json")

    assert response.status_code == 403
    assert response.json()["detail"] == "Only staff granted jobs.add_job may do this."
    assert not Job.objects.exists()


def test_a_user_without_a_tenant_cannot_enqueue(clock):
    nemo = as_user(granted(staff("nemo"), "jobs.add_job"))

    response = nemo.post("/api/jobs/", {"type": "tests.noop"}, format="json")

    assert response.status_code == 403
    assert "no tenant" in response.json()["detail"]
    assert not Job.objects.exists()


# --- operator actions ---------------------------------------------------------------------


def running(acme) -> Job:
    make_job(tenant=acme)
    return claim_one()[0]


def failed(acme) -> Job:
    return finished("tests.permanent", tenant=acme)


def pending(acme) -> Job:
    return make_job(tenant=acme)


def scheduled(acme) -> Job:
    from jobs import clock

    return make_job(tenant=acme, run_after=clock.now() + timedelta(hours=1))


def succeeded(acme) -> Job:
    return finished("tests.noop", tenant=acme)


# action, a job it applies to and the state it leaves, a job it refuses, the history kind
ACTIONS = [
    ("recover", running, "pending", succeeded, JobEvent.Kind.RECOVERED),
    ("retry", failed, "pending", pending, JobEvent.Kind.RETRIED),
    ("cancel", pending, "cancelled", succeeded, JobEvent.Kind.CANCELLED),
    ("run-now", scheduled, "pending", running, JobEvent.Kind.RUN_NOW),
]


@pytest.mark.parametrize("path, make, after, _illegal, kind", ACTIONS)
def test_staff_act_on_a_job_and_the_history_names_them(clock, alice, acme, path, make, after, _illegal, kind):
    job = make(acme)

    response = alice.post(f"/api/jobs/{job.pk}/{path}/", {"reason": "ticket 42"}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["state"] == after
    job.refresh_from_db()
    assert job.state == after
    event = job.events.get(kind=kind)
    assert (event.actor.username, event.via, event.message) == ("alice", "api", "ticket 42")
    last = response.json()["history"][-1]
    assert (last["actor"], last["via"], last["to_status"]) == ("alice", "api", after)


def test_run_now_makes_a_scheduled_job_due_now(clock, alice, acme):
    job = scheduled(acme)

    alice.post(f"/api/jobs/{job.pk}/run-now/")

    job.refresh_from_db()
    assert job.run_after == clock.now()


@pytest.mark.parametrize("path, _make, _after, illegal, _kind", ACTIONS)
def test_an_illegal_action_is_a_409_with_the_engines_message(
    clock, alice, acme, path, _make, _after, illegal, _kind
):
    job = illegal(acme)
    before = job.events.count()

    response = alice.post(f"/api/jobs/{job.pk}/{path}/")

    assert response.status_code == 409
    assert response.json()["detail"].startswith(f"job {job.pk} is {job.state};")
    assert job.events.count() == before


@pytest.mark.parametrize("path, make, _after, _illegal, _kind", ACTIONS)
def test_a_non_staff_member_cannot_act_and_nothing_changes(
    clock, bob, acme, path, make, _after, _illegal, _kind
):
    job = make(acme)
    before = (job.state, job.events.count())

    response = bob.post(f"/api/jobs/{job.pk}/{path}/")

    assert response.status_code == 403
    job.refresh_from_db()
    assert (job.state, job.events.count()) == before


@pytest.mark.parametrize("path, make, _after, _illegal, _kind", ACTIONS)
def test_acting_on_another_tenants_job_is_a_404_and_nothing_changes(
    clock, globex, acme, path, make, _after, _illegal, _kind
):
    job = make(acme)
    before = (job.state, job.events.count())
    gina = as_user(granted(staff("gina", of=globex), "jobs.operate_job"))

    response = gina.post(f"/api/jobs/{job.pk}/{path}/")

    assert response.status_code == 404
    job.refresh_from_db()
    assert (job.state, job.events.count()) == before


def test_the_seeds_recover_route_recovers_a_stuck_job(clock, alice, acme):
    job = running(acme)

    response = alice.post(f"/sync/jobs/{job.pk}/recover", {"reason": "pod died"}, format="json")

    assert response.status_code == 200
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.events.get(kind=JobEvent.Kind.RECOVERED).actor.username == "alice"


def test_the_seeds_recover_route_needs_the_operate_permission_as_the_apis_does(clock, acme):
    job = running(acme)
    carl = as_user(granted(staff("carl", of=acme), "jobs.add_job"))

    response = carl.post(f"/sync/jobs/{job.pk}/recover", {"reason": "pod died"}, format="json")

    assert response.status_code == 403
    assert "jobs.operate_job" in response.json()["detail"]
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING


def test_the_seeds_recover_route_keeps_tenants_apart(clock, alice, globex):
    job = running(globex)

    assert alice.post(f"/sync/jobs/{job.pk}/recover").status_code == 404
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING


@pytest.mark.parametrize(("path", "make", "_after", "_illegal", "_kind"), ACTIONS)
def test_staff_without_the_operate_permission_get_403_and_nothing_changes(
    clock, acme, path, make, _after, _illegal, _kind
):
    job = make(acme)
    before = (job.state, job.events.count())
    carl = as_user(staff("carl", of=acme))

    response = carl.post(f"/api/jobs/{job.pk}/{path}/")

    assert response.status_code == 403
    assert "jobs.operate_job" in response.json()["detail"]
    job.refresh_from_db()
    assert (job.state, job.events.count()) == before


# --- authentication ----------------------------------------------------------------------


def test_a_token_authenticates_reads_and_writes(clock, acme):
    token = Token.objects.create(user=granted(staff("alice", of=acme), "jobs.operate_job"))
    job = make_job(tenant=acme)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    assert ids(client.get("/api/jobs/")) == [job.pk]
    assert client.post(f"/api/jobs/{job.pk}/cancel/").status_code == 200


def test_anonymous_callers_are_refused(clock, acme):
    job = make_job(tenant=acme)
    client = APIClient()

    assert client.get("/api/jobs/").status_code == 401
    assert client.get(f"/api/jobs/{job.pk}/").status_code == 401
    assert client.post(f"/api/jobs/{job.pk}/cancel/").status_code == 401
    assert client.post("/api/jobs/", {"type": "tests.noop"}).status_code == 401
    job.refresh_from_db()
    assert job.state == Job.State.PENDING and Job.objects.count() == 1


def test_a_wrong_token_is_refused():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    response = client.get("/api/jobs/")

    assert response.status_code in (401, 403)
    assert response.json()["detail"] == "Invalid token."


# --- events and deliveries ------------------------------------------------------------------


def test_events_list_with_their_delivery_counts(clock, alice, acme, globex):
    event = publish("OrderPlaced", {"order": 1}, tenant=acme)
    publish("OrderPlaced", {"order": 2}, tenant=globex)
    run_next()

    response = alice.get("/api/events/")

    assert ids(response) == [event.pk]
    row = response.json()["results"][0]
    assert row["name"] == "OrderPlaced"
    assert row["deliveries"] == {
        "total": 2,
        "pending": 1,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
        "cancelled": 0,
    }


def test_an_event_shows_its_deliveries(clock, alice, acme):
    event = publish("OrderPlaced", {"order": 1, "fail": True}, tenant=acme)
    run_next(), run_next()  # the audit succeeds; on_order_placed fails: retry in 60 s

    body = alice.get(f"/api/events/{event.pk}/").json()

    by_subscriber = {d["subscriber"]: d for d in body["delivery_jobs"]}
    assert set(by_subscriber) == {"tests.on_order_placed", "tests.audit_order"}
    placed = by_subscriber["tests.on_order_placed"]
    job = Job.objects.get(pk=placed["job"])
    assert placed["state"] == "pending"
    assert placed["attempts"] == 1
    assert placed["deliver_after"] == job.run_after.isoformat().replace("+00:00", "Z")
    assert job.run_after == clock.now() + timedelta(seconds=60)


def test_events_filter_strictly(clock, alice, acme):
    publish("OrderPlaced", {}, tenant=acme)

    assert ids(alice.get("/api/events/", {"name": "OrderShipped"})) == []
    assert alice.get("/api/events/", {"nam": "OrderPlaced"}).status_code == 400


def test_another_tenants_event_is_a_404(clock, alice, globex):
    event = publish("OrderPlaced", {"secret": "globex"}, tenant=globex)

    response = alice.get(f"/api/events/{event.pk}/")

    assert response.status_code == 404
    assert "globex" not in response.content.decode()


# --- OpenAPI -------------------------------------------------------------------------------


def test_the_schema_generates_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))

    schema = out.read_text()
    for path in (
        "/api/jobs/{id}/recover/",
        "/api/jobs/{id}/run-now/",
        "/api/jobs/dashboard/",
        "/api/events/{id}/",
        "/sync/jobs/{id}/recover",
    ):
        assert path in schema


def test_the_schema_is_served(alice):
    response = alice.get("/api/schema/")

    assert response.status_code == 200
    assert b"openapi" in response.content


def test_the_schema_is_served_to_a_token_holder(acme):
    token = Token.objects.create(user=staff("bob", of=acme, is_staff=False))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    assert client.get("/api/schema/").status_code == 200


def test_the_schema_refuses_anonymous_callers_with_401():
    response = APIClient().get("/api/schema/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert b"openapi" not in response.content


def test_the_docs_page_loads_swagger_from_the_sidecar_not_a_cdn(alice):
    response = alice.get("/api/docs/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist" in page
    assert "cdn" not in page.lower()


def test_the_docs_page_has_no_inline_script_and_serves_its_own(alice):
    page = alice.get("/api/docs/").content.decode()
    script = alice.get("/api/docs/?script=")

    assert '<script src="/api/docs/?script="></script>' in page
    assert "<script>" not in page
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in script.content.decode()


def test_the_docs_page_sends_an_anonymous_person_to_the_login_and_back():
    response = APIClient().get("/api/docs/")

    assert response.status_code == 302
    assert response.url == "/admin/login/?next=/api/docs/"
