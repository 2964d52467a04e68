"""Ingest runs in the REST API: starting a run, listing and reading runs, and the
operator actions, each scoped to the caller's tenant and recorded with its actor."""

from __future__ import annotations

import json

import pytest

import jobs
from ingest.runs import services
from ingest.runs.errors import TransientResourceError
from ingest.runs.models import ActionKind, IngestRun, RunStatus
from ingest.runs.runners.local import LocalRunner
from jobs.models import Job
from tests.support.base import as_user, granted, staff
from tests.support.ingest import builders
from tests.support.ingest.running import drain, stalled_after_a_crash

pytestmark = pytest.mark.django_db

RUNS = "/api/ingest/runs/"


@pytest.fixture
def alice(acme):
    """Acme staff: reads and writes."""
    return as_user(granted(staff("alice", of=acme), "ingest.operate_ingestrun"))


@pytest.fixture
def bob(acme):
    """An Acme member who is not staff: reads only."""
    return as_user(staff("bob", of=acme, is_staff=False))


@pytest.fixture
def gina(globex):
    """Globex staff."""
    return as_user(granted(staff("gina", of=globex), "ingest.operate_ingestrun"))


@pytest.fixture
def olga():
    """A platform operator."""
    return as_user(granted(staff("olga", operator=True), "ingest.operate_ingestrun"))


# --- starting ---------------------------------------------------------------------------------


def test_staff_start_a_run_by_name_and_the_start_is_recorded_with_them(alice, acme):
    source = builders.source(acme)

    response = alice.post(RUNS, {"source": "orders"}, format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    run = IngestRun.objects.get()
    assert (body["id"], body["source"], body["source_id"], body["status"]) == (
        run.pk,
        "orders",
        source.pk,
        "running",
    )
    assert body["started_by"] == "alice" and body["tenant"] == acme.pk
    assert body["actions"] == [
        {
            "at": body["actions"][0]["at"],
            "kind": "started",
            "from_status": "",
            "to_status": "running",
            "actor": "alice",
            "via": "api",
            "message": "",
            "detail": {},
        }
    ]
    action = run.actions.get()
    assert (action.actor.username, action.via) == ("alice", "api")


def test_a_run_starts_by_the_sources_id_too(alice, acme):
    source = builders.source(acme)

    response = alice.post(RUNS, {"source": source.pk}, format="json")

    assert response.status_code == 201
    assert response.json()["source_id"] == source.pk


def test_a_source_with_a_running_run_answers_409_naming_it(alice, acme):
    builders.source(acme)
    first = alice.post(RUNS, {"source": "orders"}, format="json").json()

    response = alice.post(RUNS, {"source": "orders"}, format="json")

    assert response.status_code == 409
    assert response.json()["run"] == first["id"]
    assert "already has run" in response.json()["detail"]
    assert IngestRun.objects.count() == 1


def test_a_disabled_source_is_refused_with_the_reason(alice, acme):
    source = builders.source(acme)
    source.enabled = False
    source.save()

    response = alice.post(RUNS, {"source": "orders"}, format="json")

    assert response.status_code == 409
    assert response.json() == {"detail": "source 'orders' is disabled", "run": None}


def test_a_source_whose_config_its_ingester_cannot_use_is_refused_naming_the_problem(alice, acme):
    builders.source(acme, config={"batches": 2, "size": "lots"})

    response = alice.post(RUNS, {"source": "orders"}, format="json")

    assert response.status_code == 409
    assert response.json() == {
        "detail": "source 'orders' cannot run: the source's config cannot be "
        "used: size: A valid integer is required.",
        "run": None,
    }
    assert not IngestRun.objects.exists()


@pytest.mark.parametrize(
    "body, problem",
    [
        ({}, "This field is required."),
        ({"source": "nope"}, "unknown source 'nope'"),
        ({"source": 999999}, "unknown source 999999"),
        ({"source": True}, "a source's id (a number) or name (a string)"),
        ({"source": ["orders"]}, "a source's id (a number) or name (a string)"),
        ({"source": 0}, "an id is between 1"),
        ({"source": "x" * 65}, "a name of 1 to 64 characters"),
    ],
)
def test_a_missing_or_unknown_source_is_a_400_naming_it(alice, acme, body, problem):
    builders.source(acme)

    response = alice.post(RUNS, body, format="json")

    assert response.status_code == 400
    assert problem in response.json()["source"][0]
    assert not IngestRun.objects.exists()


def test_other_bodies_are_400s_naming_the_problem(alice, acme):
    builders.source(acme)

    assert "body must be a JSON object" in str(alice.post(RUNS, ["orders"], format="json").json())
    assert "NUL" in alice.post(RUNS, {"source": "or\x00ders"}, format="json").json()["detail"]
    unknown = alice.post(RUNS, {"source": "orders", "when": "now"}, format="json")
    assert unknown.status_code == 400 and unknown.json() == {"when": ["unknown field"]}
    assert not IngestRun.objects.exists()


def test_another_tenants_source_is_unknown_by_name_and_by_id(gina, acme, globex):
    source = builders.source(acme)

    for reference in ("orders", source.pk):
        response = gina.post(RUNS, {"source": reference}, format="json")
        assert response.status_code == 400
        assert response.json()["source"] == [f"unknown source {reference!r}"]
    assert not IngestRun.objects.exists()


def test_staff_without_the_operate_permission_may_not_start_a_run_as_in_the_admin(acme):
    """Starting a run is an operation, in the admin as here: ingest.operate_ingestrun."""
    builders.source(acme)
    carl = as_user(staff("carl", of=acme))

    response = carl.post(RUNS, {"source": "orders"}, format="json")

    assert response.status_code == 403
    assert response.json()["detail"] == "Only staff granted ingest.operate_ingestrun may do this."
    assert not IngestRun.objects.exists()


def test_a_member_who_is_not_staff_may_not_start_a_run(bob, acme):
    builders.source(acme)

    response = bob.post(RUNS, {"source": "orders"}, format="json")

    assert response.status_code == 403
    assert not IngestRun.objects.exists()


def test_an_operator_names_the_tenant_when_several_have_the_source(olga, acme, globex):
    builders.source(acme)
    builders.source(globex)

    ambiguous = olga.post(RUNS, {"source": "orders"}, format="json")
    started = olga.post(RUNS, {"source": "orders", "tenant": "globex"}, format="json")

    assert ambiguous.status_code == 400
    assert "several tenants have a source named 'orders'" in ambiguous.json()["source"][0]
    assert started.status_code == 201 and started.json()["tenant"] == globex.pk


# --- reading ---------------------------------------------------------------------------------


def test_the_list_shows_the_callers_tenants_runs_newest_first(alice, olga, gina, acme, globex):
    first = services.start_ingest(builders.source(acme, "orders"))
    second = services.start_ingest(builders.source(acme, "invoices"))
    theirs = services.start_ingest(builders.source(globex, "orders"))

    mine = alice.get(RUNS).json()["results"]
    everyone = olga.get(RUNS).json()["results"]

    assert [run["id"] for run in mine] == [second.pk, first.pk]
    assert [run["id"] for run in gina.get(RUNS).json()["results"]] == [theirs.pk]
    assert {run["id"] for run in everyone} == {first.pk, second.pk, theirs.pk}


def test_the_list_filters_by_status_source_and_start_time(alice, acme, clock):
    orders = services.start_ingest(builders.source(acme, "orders"))
    clock.advance(3600)
    invoices = services.start_ingest(builders.source(acme, "invoices"))
    services.cancel_run(invoices, via="api")

    def ids(query: str) -> list[int]:
        response = alice.get(RUNS + query)
        assert response.status_code == 200, response.json()
        return [run["id"] for run in response.json()["results"]]

    assert ids("?status=running") == [orders.pk]
    assert ids("?status=running&status=cancelled") == [invoices.pk, orders.pk]
    assert ids("?source=invoices") == [invoices.pk]
    later = (orders.started_at.replace(microsecond=0)).isoformat().replace("+00:00", "Z")
    assert ids(f"?started_after={later}") == [invoices.pk, orders.pk]
    assert ids(f"?started_before={later}") == []
    assert ids("?source=nothing") == []


@pytest.mark.parametrize(
    "query, parameter",
    [
        ("?status=bogus", "status"),
        ("?started_after=yesterday", "started_after"),
        ("?started_before=2024-01-01T00:00:00%2B20:00", "started_before"),
        ("?stat=failed", "stat"),
        ("?cursor=garbage", "cursor"),
        ("?page_size=many", "page_size"),
        ("?page_size=true", "page_size"),
    ],
)
def test_bad_filters_are_400s_naming_them(alice, acme, query, parameter):
    services.start_ingest(builders.source(acme))

    response = alice.get(RUNS + query)

    assert response.status_code == 400
    assert parameter in response.json()


def test_a_run_shows_its_batches_hook_executions_counts_and_failures(bob, acme, clock):
    source = builders.source(
        acme, batches=2, hooks=[builders.PASS, builders.exit_with(3, "bad row 7")], max_failures=5
    )
    run = services.start_ingest(source)
    drain(clock)

    body = bob.get(f"{RUNS}{run.pk}/").json()

    assert body["status"] == "failed"
    assert "2 of 2 batches failed their hooks" in body["failure_reason"]
    assert body["counts"]["batches"] == {
        "fetched": 0,
        "checking": 0,
        "hooks_failed": 2,
        "checked": 0,
        "published": 0,
    }
    assert body["counts"]["hook_executions"]["succeeded"] == 2
    assert body["counts"]["hook_executions"]["failed"] == 2
    assert [batch["sequence"] for batch in body["batches"]] == [1, 2]
    assert body["earlier_batches"] == 0
    first = body["batches"][0]
    assert (first["status"], first["records"]) == ("hooks_failed", 2)
    passed, failed = first["hook_executions"]
    assert (passed["hook"], passed["status"], passed["exit_code"]) == ("hook0", "succeeded", 0)
    assert (failed["hook"], failed["status"], failed["exit_code"], failed["tries"]) == (
        "hook1",
        "failed",
        3,
        1,
    )
    assert (passed["entry"], failed["entry"]) == ("acme-orders-hook0", "acme-orders-hook1")
    assert "bad row 7" in failed["log_tail"]
    assert failed["job_name"].startswith("conveyor-hook-")
    assert failed["pod_phase"] == "Failed"
    delivery = first["hooks_delivery"]
    assert (delivery["state"], delivery["attempts"]) == ("failed", 1)
    assert Job.objects.get(pk=delivery["job"]).type == "ingest.RunHooks"
    assert [action["kind"] for action in body["actions"]] == ["started", "failed"]


def test_a_member_reads_why_a_run_stalled_without_the_servers_traceback(bob, acme, clock, monkeypatch):
    run = stalled_after_a_crash(acme, clock, monkeypatch)

    listed = bob.get(RUNS).json()["results"]
    detail = bob.get(f"{RUNS}{run.pk}/").json()

    job = Job.objects.get(pipeline_id=run.pipeline, state="failed")
    assert (
        detail["failure_reason"]
        == run.failure_reason
        == (
            "stalled: nothing of the run is queued or running; the last failure: ingest.RunIngester "
            f"#{job.pk}: RuntimeError: the parser lost its place"
        )
    )
    for shown in (json.dumps(listed), json.dumps(detail)):
        assert "Traceback" not in shown and 'File \\"' not in shown and ".py" not in shown
    assert 'File "' in job.last_error  # the job keeps the frames, for the staff


def test_a_reason_stored_with_a_traceback_shows_it_to_staff_only(alice, bob, acme):
    run = services.start_ingest(builders.source(acme))
    reason = (
        'stalled; the last failure: RuntimeError: boom\n  File "/srv/conveyor/ingest/x.py", '
        "line 3, in fetch\n    raise RuntimeError('boom')\n"
    )
    IngestRun.objects.filter(pk=run.pk).update(
        status=RunStatus.FAILED, failure_reason=reason, finished_at=jobs.now()
    )

    assert bob.get(f"{RUNS}{run.pk}/").json()["failure_reason"] == (
        "stalled; the last failure: RuntimeError: boom"
    )
    assert bob.get(RUNS).json()["results"][0]["failure_reason"] == (
        "stalled; the last failure: RuntimeError: boom"
    )
    assert alice.get(f"{RUNS}{run.pk}/").json()["failure_reason"] == reason


def test_a_run_waiting_on_its_hooks_shows_when_they_are_tried_again(alice, acme, clock, monkeypatch):
    def busy(self, spec):
        raise TransientResourceError("the cluster is full")

    monkeypatch.setattr(LocalRunner, "launch", busy)
    run = services.start_ingest(builders.source(acme, batches=1))
    jobs.run_until_idle()

    batch = alice.get(f"{RUNS}{run.pk}/").json()["batches"][0]
    delivery = batch["hooks_delivery"]
    assert (delivery["state"], delivery["attempts"], delivery["max_attempts"]) == ("pending", 1, 6)
    assert delivery["deliver_after"] > batch["fetched_at"]
    assert batch["hook_executions"][0]["reason"] == "try 1: the cluster is full"


def test_another_tenants_run_is_404_and_stays_as_it_was(gina, acme):
    run = services.start_ingest(builders.source(acme))

    for path in ("", "cancel/", "retry-hooks/", "retry-from-batch/"):
        method = gina.get if not path else gina.post
        assert method(f"{RUNS}{run.pk}/{path}").status_code == 404, path
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert list(run.actions.values_list("kind", flat=True)) == [ActionKind.STARTED]


# --- operator actions --------------------------------------------------------------------------


def test_cancel_answers_the_run_and_records_who_and_why_then_409(alice, acme):
    run = services.start_ingest(builders.source(acme))

    response = alice.post(f"{RUNS}{run.pk}/cancel/", {"reason": "wrong file"}, format="json")
    again = alice.post(f"{RUNS}{run.pk}/cancel/", {}, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    action = run.actions.get(kind=ActionKind.CANCELLED)
    assert (action.actor.username, action.via, action.message) == ("alice", "api", "wrong file")
    assert again.status_code == 409
    assert again.json() == {"detail": f"run {run.pk} is already cancelled", "run": run.pk}


@pytest.mark.parametrize("path", ["cancel", "retry-hooks", "retry-from-batch"])
def test_staff_without_the_operate_permission_get_403_and_the_run_stays(acme, path):
    run = services.start_ingest(builders.source(acme))
    carl = as_user(staff("carl", of=acme))

    response = carl.post(f"{RUNS}{run.pk}/{path}/", {}, format="json")

    assert response.status_code == 403
    assert "ingest.operate_ingestrun" in response.json()["detail"]
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and not run.actions.exclude(kind=ActionKind.STARTED).exists()


def test_a_member_may_not_cancel(bob, acme):
    run = services.start_ingest(builders.source(acme))

    assert bob.post(f"{RUNS}{run.pk}/cancel/").status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_a_bad_cancel_body_is_a_400(alice, acme):
    run = services.start_ingest(builders.source(acme))

    assert alice.post(f"{RUNS}{run.pk}/cancel/", ["now"], format="json").status_code == 400
    assert alice.post(f"{RUNS}{run.pk}/cancel/", {"reason": "x" * 1001}, format="json").json() == {
        "reason": ["Ensure this field has no more than 1000 characters."]
    }


def test_retry_hooks_reopens_a_failed_run_and_it_succeeds(alice, acme, clock):
    source = builders.source(acme, batches=2, hooks=[builders.exit_with(1)], max_failures=5)
    run = services.start_ingest(source)
    drain(clock)
    builders.run_instead(source, builders.PASS)

    response = alice.post(f"{RUNS}{run.pk}/retry-hooks/")
    drain(clock)

    assert response.status_code == 200 and response.json()["status"] == "running"
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    action = run.actions.get(kind=ActionKind.RETRIED_HOOKS)
    assert (action.actor.username, action.via, action.message) == ("alice", "api", "batches 1, 2")
    nothing = alice.post(f"{RUNS}{run.pk}/retry-hooks/")
    assert nothing.status_code == 409 and "no batch whose hooks failed" in nothing.json()["detail"]


def test_retry_from_batch_goes_on_where_the_source_failed(alice, acme, clock):
    source = builders.source(acme, config={"batches": 2, "size": 1, "fail_at": 2})
    run = services.start_ingest(source)
    drain(clock)
    source.config = {"batches": 2, "size": 1}
    source.save()

    response = alice.post(f"{RUNS}{run.pk}/retry-from-batch/")
    drain(clock)

    assert response.status_code == 200
    run.refresh_from_db()
    assert (run.status, run.records_published) == (RunStatus.SUCCEEDED, 2)
    assert run.actions.get(kind=ActionKind.RETRIED_FROM_BATCH).actor.username == "alice"
    again = alice.post(f"{RUNS}{run.pk}/retry-from-batch/")
    assert again.status_code == 409 and again.json()["run"] == run.pk
