"""Remote workers run the engine's jobs over the internal API: claim, heartbeat, progress,
success, failure, snooze and hand-back under the lease of their claim, with the engine's
fencing, reaper, time limits, history and cancel applied as to a local job."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from jobs import engine, reaper, remote
from jobs.heartbeat import register_worker
from jobs.models import Job, JobEvent, Worker
from jobs.why import explain
from jobs.worker import run_until_idle
from tests.support.base import as_user, make_job, staff

pytestmark = pytest.mark.django_db
TOKEN = "r" * 40
OTHER = "o" * 40
TYPE = "tests.remote_render"


@pytest.fixture
def credentials(settings):
    settings.JOBS_REMOTE_WORKERS = {
        "render": {"token": TOKEN, "queues": ["remote-tests"]},
        "elsewhere": {"token": OTHER, "queues": ["other-remote"]},
    }


def client(token: str = TOKEN) -> APIClient:
    made = APIClient()
    made.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return made


@pytest.fixture
def worker(credentials) -> APIClient:
    return client()


def post(api: APIClient, path: str, body: dict) -> dict:
    answer = api.post(f"/internal/jobs/{path}", body, format="json")
    assert answer.status_code == 200, answer.content
    return answer.json()


def claim(api: APIClient, limit: int = 5, name: str = "pod-a") -> dict:
    return post(api, "claim", {"worker": name, "limit": limit})


def test_a_remote_job_is_claimed_only_by_its_remote_worker(worker, clock):
    job = make_job(TYPE, {"page": 1})
    local = make_job("tests.noop", {"n": 1}, queue="remote-tests")

    run_until_idle()  # the cluster's worker, on every queue
    job.refresh_from_db()
    assert job.state == Job.State.PENDING

    answer = claim(worker)
    assert [claimed["id"] for claimed in answer["jobs"]] == [job.pk]
    claimed = answer["jobs"][0]
    assert (claimed["type"], claimed["payload"], claimed["attempt"]) == (TYPE, {"page": 1}, 1)
    assert answer["heartbeat_seconds"] == 2.0  # a third of its 6 s lease
    assert answer["worker"] == "render/pod-a"
    job.refresh_from_db()
    local.refresh_from_db()
    assert (job.state, job.attempts, job.locked_by) == (Job.State.RUNNING, 1, "render/pod-a")
    assert local.state == Job.State.SUCCEEDED  # a local type on that queue is the cluster's
    assert Worker.objects.get(name="render/pod-a").hostname == "remote (render)"


def test_success_with_its_result_and_progress_goes_into_the_history(worker, clock):
    job = make_job(TYPE)
    lease = claim(worker)["lease"]
    beat = post(
        worker,
        "heartbeat",
        {
            "worker": "pod-a",
            "lease": lease,
            "jobs": [job.pk],
            "progress": {str(job.pk): {"done": 5, "total": 10}},
        },
    )
    assert beat["renewed"] == [job.pk] and beat["lost"] == []
    done = post(
        worker,
        f"{job.pk}/complete",
        {"worker": "pod-a", "lease": lease, "result": {"rows": 10}, "progress": {"done": 10, "total": 10}},
    )
    assert done["job"]["state"] == "succeeded"
    job.refresh_from_db()
    assert (job.result, job.progress_done, job.progress_total) == ({"rows": 10}, 10, 10)
    kinds = list(job.events.order_by("id").values_list("kind", "worker"))
    assert kinds == [
        ("claimed", "render/pod-a"),
        ("progress", "render/pod-a"),
        ("succeeded", "render/pod-a"),
    ]


def test_a_failure_is_retried_after_the_types_backoff_then_fails_for_good(worker, clock):
    job = make_job(TYPE)
    lease = claim(worker)["lease"]
    first = post(worker, f"{job.pk}/fail", {"worker": "pod-a", "lease": lease, "error": "engine busy"})
    assert first["job"]["state"] == "pending"
    job.refresh_from_db()
    assert (job.run_after - clock.now()).total_seconds() == pytest.approx(30)
    assert claim(worker)["jobs"] == []  # not before its backoff
    clock.advance(31)
    lease = claim(worker)["lease"]
    last = post(worker, f"{job.pk}/fail", {"worker": "pod-a", "lease": lease, "error": "engine busy"})
    assert last["job"]["state"] == "failed"
    job.refresh_from_db()
    assert job.last_error == "engine busy"
    assert job.events.latest("id").message == "attempts exhausted (2): engine busy"


def test_a_snooze_gives_the_attempt_back(worker, clock):
    job = make_job(TYPE)
    lease = claim(worker)["lease"]
    post(
        worker,
        f"{job.pk}/snooze",
        {"worker": "pod-a", "lease": lease, "seconds": 5, "message": "still running"},
    )
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.PENDING, 0)
    clock.advance(5)
    assert [j["attempt"] for j in claim(worker)["jobs"]] == [1]


def test_an_operators_cancel_reaches_the_worker_at_its_next_heartbeat(worker, clock):
    job = make_job(TYPE)
    lease = claim(worker)["lease"]
    engine.cancel(job, actor=staff("olga", operator=True), via="admin")

    beat = post(worker, "heartbeat", {"worker": "pod-a", "lease": lease, "jobs": [job.pk]})
    assert beat["renewed"] == []
    assert beat["lost"] == [{"id": job.pk, "state": "cancelled", "reason": "cancelled"}]
    late = worker.post(
        f"/internal/jobs/{job.pk}/complete", {"worker": "pod-a", "lease": lease}, format="json"
    )
    assert late.status_code == 409
    assert late.json()["lost"]["state"] == "cancelled"
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED and job.result is None


def test_the_time_limit_is_enforced_at_the_first_heartbeat_past_it(worker, clock):
    job = make_job(TYPE)
    lease = claim(worker)["lease"]
    for _ in range(29):  # 58 s of beats: within the 60 s limit
        clock.advance(2)
        assert post(worker, "heartbeat", {"worker": "pod-a", "lease": lease, "jobs": [job.pk]})[
            "renewed"
        ] == [job.pk]
    clock.advance(2)
    beat = post(worker, "heartbeat", {"worker": "pod-a", "lease": lease, "jobs": [job.pk]})
    assert beat["lost"] == [{"id": job.pk, "state": "pending", "reason": "ran past its time limit"}]
    job.refresh_from_db()
    assert (job.state, job.error_kind) == (Job.State.PENDING, Job.ErrorKind.TIMEOUT)
    assert job.last_error == "HandlerTimeout: ran past its time limit of 60 s"


def test_a_worker_that_stops_beating_loses_its_jobs_to_the_reaper(worker, clock):
    job = make_job(TYPE)
    lease = claim(worker)["lease"]
    clock.advance(7)
    assert reaper.rescue_expired().rescued == 1
    beat = post(worker, "heartbeat", {"worker": "pod-a", "lease": lease, "jobs": [job.pk]})
    assert beat["lost"][0]["reason"] == "its lease expired and the reaper took it back"
    again = claim(worker, name="pod-b")
    assert [j["id"] for j in again["jobs"]] == [job.pk]
    assert again["lease"] != lease


def test_a_shutting_down_worker_hands_its_jobs_back_unspent(worker, clock):
    jobs = [make_job(TYPE, {"n": n}) for n in range(3)]
    lease = claim(worker)["lease"]
    assert post(worker, "release", {"worker": "pod-a", "lease": lease, "jobs": [j.pk for j in jobs]}) == {
        "released": 3
    }
    for job in jobs:
        job.refresh_from_db()
        assert (job.state, job.attempts) == (Job.State.PENDING, 0)
    assert JobEvent.objects.filter(kind="released", message="handed back by its remote worker").count() == 3


def test_a_credential_reaches_only_its_own_queues(worker, clock):
    job = make_job(TYPE)
    other = client(OTHER)
    assert claim(other)["jobs"] == []
    lease = claim(worker)["lease"]
    stolen = other.post(f"/internal/jobs/{job.pk}/complete", {"worker": "x", "lease": lease}, format="json")
    assert stolen.status_code == 409
    assert stolen.json()["lost"]["reason"] == "no such job on this credential's queues"
    asked = other.post(
        "/internal/jobs/claim", {"worker": "x", "limit": 1, "queues": ["remote-tests"]}, format="json"
    )
    assert asked.status_code == 400
    assert "serves other-remote, not remote-tests" in asked.json()["queues"][0]
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING


def test_without_a_credential_nothing_opens(credentials, clock):
    make_job(TYPE)
    for api in (APIClient(), client("g" * 40), as_user(staff(operator=True))):
        answer = api.post("/internal/jobs/claim", {"worker": "w", "limit": 1}, format="json")
        assert answer.status_code in (401, 403)
    assert not Job.objects.filter(state=Job.State.RUNNING).exists()


def test_a_report_under_a_stale_lease_changes_nothing(worker, clock):
    job = make_job(TYPE)
    claim(worker)
    forged = worker.post(
        f"/internal/jobs/{job.pk}/fail",
        {"worker": "pod-a", "lease": str(uuid.uuid4()), "error": "x"},
        format="json",
    )
    assert forged.status_code == 409
    assert forged.json()["lost"]["reason"] == "claimed again under another lease"
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING and job.last_error == ""


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("claim", {"worker": "w", "limit": 0}, "limit"),
        ("claim", {"worker": "", "limit": 1}, "worker"),
        ("heartbeat", {"worker": "w", "lease": "not-a-uuid", "jobs": []}, "lease"),
        ("heartbeat", {"worker": "w", "lease": str(uuid.uuid4()), "jobs": ["x"]}, "jobs"),
        (
            "heartbeat",
            {"worker": "w", "lease": str(uuid.uuid4()), "jobs": [], "progress": {"a": {"done": 1}}},
            "progress",
        ),
        ("1/snooze", {"worker": "w", "lease": str(uuid.uuid4()), "seconds": -1}, "seconds"),
        (
            "1/snooze",
            {"worker": "w", "lease": str(uuid.uuid4()), "seconds": 1, "wake_on": "has space"},
            "wake_on",
        ),
        ("1/fail", {"worker": "w", "lease": str(uuid.uuid4())}, "error"),
        ("1/complete", {"worker": "w", "lease": str(uuid.uuid4()), "result": [1, 2]}, "result"),
    ],
)
def test_a_bad_request_is_refused_naming_its_field(worker, clock, path, body, field):
    job = make_job(TYPE)
    lease = claim(worker)["lease"]
    if "lease" in body and path.startswith("1/"):
        body = {**body, "lease": lease}
        path = path.replace("1/", f"{job.pk}/")
    answer = worker.post(f"/internal/jobs/{path}", body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.RUNNING, 1)


def test_credentials_are_checked(settings):
    settings.JOBS_REMOTE_WORKERS = {
        "short": {"token": "abc", "queues": ["q"]},
        "noqueues": {"token": "x" * 40, "queues": []},
        "twin": {"token": "x" * 40, "queues": ["q"]},
        "odd": {"token": "y" * 40, "queues": ["q"], "role": "admin"},
    }
    problems = remote.credential_problems()
    assert "credential 'short': its token must be at least 32 characters" in problems
    assert "credential 'noqueues': queues must be a non-empty list of queue names" in problems
    assert "credentials 'noqueues' and 'twin' share a token" in problems
    assert "credential 'odd' must be {'token': …, 'queues': […]}" in problems


HOOKED = "tests.remote_hooked"


@pytest.fixture
def calls():
    from tests.support.handlers import REMOTE_HOOK_CALLS

    REMOTE_HOOK_CALLS.clear()
    return REMOTE_HOOK_CALLS


def test_the_types_hooks_describe_the_claim_and_record_each_outcome(worker, clock, calls):
    done, failed = make_job(HOOKED, {"page": 1}), make_job(HOOKED, {"page": 2})
    answer = claim(worker)
    assert {job["id"]: job["details"] for job in answer["jobs"]} == {
        done.pk: {"page": 1, "format": "png"},
        failed.pk: {"page": 2, "format": "png"},
    }
    lease = answer["lease"]
    post(worker, f"{done.pk}/complete", {"worker": "pod-a", "lease": lease, "result": {"pixels": 4}})
    post(worker, f"{failed.pk}/fail", {"worker": "pod-a", "lease": lease, "error": "font missing"})
    assert calls[2:] == [("complete", done.pk, {"pixels": 4}), ("fail", failed.pk, True)]


def test_a_result_the_type_refuses_leaves_the_job_running(worker, clock, calls):
    job = make_job(HOOKED, {"page": 1})
    lease = claim(worker)["lease"]
    refused = worker.post(
        f"/internal/jobs/{job.pk}/complete",
        {"worker": "pod-a", "lease": lease, "result": {"pixels": -1}},
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json() == {"result": ["result: pixels are never negative"]}
    job.refresh_from_db()
    assert (job.state, job.result) == (Job.State.RUNNING, None)
    assert not job.events.filter(kind="succeeded").exists()


def test_the_type_decides_how_long_a_snooze_lasts(worker, clock, calls):
    job = make_job(HOOKED, {"page": 1})
    lease = claim(worker)["lease"]
    post(
        worker,
        f"{job.pk}/snooze",
        {"worker": "pod-a", "lease": lease, "seconds": 60, "details": {"polls": 2}},
    )
    job.refresh_from_db()
    assert (job.run_after - clock.now()).total_seconds() == 5
    assert calls[-1] == ("snooze", job.pk, {"polls": 2})


def test_a_job_its_type_cannot_describe_fails_for_good_instead_of_going_out(worker, clock, calls):
    job = make_job(HOOKED, {"page": 9, "gone": True})
    assert claim(worker)["jobs"] == []
    job.refresh_from_db()
    assert (job.state, job.error_kind) == (Job.State.FAILED, Job.ErrorKind.PERMANENT)
    assert job.last_error == "cannot be run: page 9 was deleted"


def test_an_operators_action_reaches_the_types_rows_in_its_transaction(worker, clock, calls):
    job = make_job(HOOKED, {"page": 1})
    claim(worker)
    operator = staff("olga")
    engine.cancel(job, actor=operator, via="admin")
    engine.retry(job, actor=operator, via="api")
    assert calls[-2:] == [
        ("operator", job.pk, ("cancel", Job.State.CANCELLED)),
        ("operator", job.pk, ("retry", Job.State.PENDING)),
    ]


def test_a_hand_back_reaches_the_types_rows_for_the_jobs_that_went_back(worker, clock, calls):
    kept, handed = make_job(HOOKED, {"page": 1}), make_job(HOOKED, {"page": 2})
    lease = claim(worker)["lease"]
    post(worker, "release", {"worker": "pod-a", "lease": lease, "jobs": [handed.pk]})
    assert calls[-1] == ("release", handed.pk, Job.State.RUNNING)  # as the worker held it
    assert [call for call in calls if call[0] == "release"] == [calls[-1]]
    kept.refresh_from_db()
    assert kept.state == Job.State.RUNNING


def test_a_snooze_after_a_cancel_is_fenced_before_the_type_sees_it(worker, clock, calls):
    job = make_job(HOOKED, {"page": 1})
    lease = claim(worker)["lease"]
    engine.cancel(job, actor=staff("olga"), via="admin")
    answer = worker.post(
        f"/internal/jobs/{job.pk}/snooze",
        {"worker": "pod-a", "lease": lease, "seconds": 5, "details": {"polls": 1}},
        format="json",
    )
    assert answer.status_code == 409 and answer.json()["lost"]["reason"] == "cancelled"
    assert not [call for call in calls if call[0] == "snooze"]


def test_an_operators_setting_can_decide_the_time_limit(worker, clock, calls):
    short, default = make_job(HOOKED, {"page": 1, "limit": 10}), make_job(HOOKED, {"page": 2})
    lease = claim(worker)["lease"]
    clock.advance(11)
    beat = post(worker, "heartbeat", {"worker": "pod-a", "lease": lease, "jobs": [short.pk, default.pk]})
    assert beat["renewed"] == [default.pk]
    assert beat["lost"] == [{"id": short.pk, "state": "failed", "reason": "ran past its time limit"}]
    short.refresh_from_db()
    assert short.last_error == "HandlerTimeout: ran past its time limit of 10 s"


def test_the_why_line_of_a_remote_job_names_the_missing_remote_worker(worker, clock):
    job = make_job(TYPE)
    register_worker("node-1-w1", hostname="node-1", pid=42, queues=[])  # a cluster worker, every queue
    assert "no remote worker serves queue 'remote-tests'" in explain(job)
    claim(worker, limit=1)  # a remote worker asks (and takes the job)
    other = make_job(TYPE)
    assert "no remote worker" not in explain(other)
