"""Export jobs over the engine's remote-worker API, as an export worker calls it: the
credential serving the ``exports`` queue claims the exports (each claim's ``details``
holding the export's spec), completes them with files inside their folders, snoozes a
submitted query until its next poll, and loses what an operator takes from it; the
export's row follows every step, and a refused step changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from exports.models import EventKind, ExportEvent, ExportJob, JobStatus, Snapshot, SnapshotStatus
from jobs import engine
from jobs.models import Job
from tests.support.base import as_user, staff
from tests.support.exports.builders import WORKER_TOKEN, jobs_of, snapshot, write_part

pytestmark = pytest.mark.django_db
OTHER_TOKEN = "o" * 40


@pytest.fixture(autouse=True)
def credentials(settings):
    settings.JOBS_REMOTE_WORKERS = {
        "exports": {"token": WORKER_TOKEN, "queues": ["exports"]},
        "render": {"token": OTHER_TOKEN, "queues": ["render"]},
    }


def client(token: str = WORKER_TOKEN) -> APIClient:
    made = APIClient()
    made.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return made


@pytest.fixture
def worker() -> APIClient:
    return client()


def call(api: APIClient, path: str, body: dict[str, Any]) -> Any:
    return api.post(f"/internal/jobs/{path}", body, format="json")


def claim(api: APIClient, name: str = "pod-a", limit: int = 10) -> dict[str, Any]:
    answer = call(api, "claim", {"worker": name, "limit": limit})
    assert answer.status_code == 200, answer.content
    return answer.json()


def spec_of(claimed: dict[str, Any]) -> dict[str, Any]:
    return claimed["details"]["spec"]


def state(row_id: int) -> tuple[dict[str, Any], tuple[Any, ...], int]:
    """The export's row, its engine job's state and the history of both: what a refused
    step must leave as it was."""
    row = ExportJob.objects.filter(pk=row_id).values().get()
    job = Job.objects.filter(pk=row["job_id"]).values_list(
        "state", "attempts", "lease_token", "result", "last_error", "run_after"
    )
    return row, job.get(), ExportEvent.objects.filter(job_id=row_id).count()


def test_a_claim_gives_each_exports_spec_nodes_before_edges(worker, clock):
    snap = snapshot()

    answer = claim(worker)

    assert answer["worker"] == "exports/pod-a"
    claimed = answer["jobs"]
    assert [job["type"] for job in claimed] == ["exports.export"] * 3
    assert [job["queue"] for job in claimed] == ["exports"] * 3
    specs = [spec_of(job) for job in claimed]
    assert [(spec["job_type"], spec["entity_name"]) for spec in specs] == [
        ("node", "entries"),
        ("node", "factors"),
        ("edge", "computed_with"),
    ]
    rows = jobs_of(snap)
    assert [job["id"] for job in claimed] == [row.job_id for row in rows]
    assert [spec["id"] for spec in specs] == [row.pk for row in rows]
    first = specs[0]
    # Datasets run on PostgreSQL, under no Trino role; the first claim is claim 1.
    assert (first["generation"], first["status"], first["engine"], first["starburst_role"]) == (
        1,
        "claimed",
        "postgres",
        "",
    )
    assert first["column_names"] == ["id", "quantity", "classification", "created_at"]
    assert first["destination"] == rows[0].destination and first["snapshot_id"] == snap.pk
    assert "claim_token" not in first  # the claim's lease is the only secret
    assert {row.status for row in jobs_of(snap)} == {JobStatus.CLAIMED}
    assert {row.claimed_by for row in jobs_of(snap)} == {"exports/pod-a"}
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING


def test_completions_with_files_in_each_jobs_folder_finish_the_snapshot(worker, clock):
    snap = snapshot()
    answer = claim(worker)

    for job in answer["jobs"]:
        spec = spec_of(job)
        write_part(spec["destination"], "part-g1.parquet", 3)
        done = call(
            worker,
            f"{job['id']}/complete",
            {
                "worker": "pod-a",
                "lease": answer["lease"],
                "result": {"rows": 3, "bytes": 10, "files": ["part-g1.parquet"], "note": "direct"},
            },
        )
        assert done.status_code == 200, done.content
        assert done.json()["job"]["state"] == "succeeded"

    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY
    assert snap.node_counts == {"entries": 3, "factors": 3} and snap.edge_counts == {"computed_with": 3}
    for row in jobs_of(snap):
        assert (row.status, row.row_count, row.size_bytes) == (JobStatus.COMPLETED, 3, 10)
        assert row.files == [f"{row.destination}/part-g1.parquet"]
        completed = row.events.get(kind=EventKind.COMPLETED)
        assert completed.worker == "exports/pod-a"


@pytest.mark.parametrize(
    "files",
    [
        ["../../../tenant-2/x.parquet"],
        ["/etc/passwd"],
        ["s3://elsewhere/x.parquet"],
        ["g1/../../x.parquet"],
        ["part-g1.parquet", ""],
        "part-g1.parquet",
    ],
)
def test_a_file_outside_the_jobs_folder_is_a_400_naming_the_result_and_nothing_changes(worker, clock, files):
    snapshot()
    answer = claim(worker, limit=1)
    job = answer["jobs"][0]
    row_id = spec_of(job)["id"]
    before = state(row_id)

    refused = call(
        worker,
        f"{job['id']}/complete",
        {"worker": "pod-a", "lease": answer["lease"], "result": {"rows": 1, "bytes": 1, "files": files}},
    )

    assert refused.status_code == 400
    assert list(refused.json()) == ["result"]
    assert state(row_id) == before


@pytest.mark.parametrize(
    "result",
    [
        {"rows": -1, "bytes": 1, "files": []},
        {"rows": 1, "files": []},
        {"rows": True, "bytes": 1, "files": []},
        ["part-g1.parquet"],
    ],
)
def test_a_result_that_is_not_counts_and_files_is_a_400_and_nothing_changes(worker, clock, result):
    snapshot()
    answer = claim(worker, limit=1)
    job = answer["jobs"][0]
    before = state(spec_of(job)["id"])

    refused = call(
        worker, f"{job['id']}/complete", {"worker": "pod-a", "lease": answer["lease"], "result": result}
    )

    assert refused.status_code == 400 and "result" in refused.json()
    assert state(spec_of(job)["id"]) == before


@pytest.mark.parametrize(
    "details",
    [{}, {"next_uri": "http://trino/v1/q/2"}, {"query_id": ""}, {"query_id": 7}, {"query_id": "q" * 201}],
)
def test_a_snooze_of_a_claimed_export_without_its_query_id_is_a_400_naming_the_details(
    worker, clock, details
):
    snapshot()
    answer = claim(worker, limit=1)
    job = answer["jobs"][0]
    before = state(spec_of(job)["id"])

    refused = call(
        worker,
        f"{job['id']}/snooze",
        {"worker": "pod-a", "lease": answer["lease"], "seconds": 2, "details": details},
    )

    assert refused.status_code == 400
    assert list(refused.json()) == ["details"]
    assert state(spec_of(job)["id"]) == before


def test_a_submitted_query_sleeps_until_its_poll_which_is_a_claim_of_its_own(worker, clock):
    snapshot()
    answer = claim(worker, limit=1)
    job = answer["jobs"][0]

    submitted = call(
        worker,
        f"{job['id']}/snooze",
        {
            "worker": "pod-a",
            "lease": answer["lease"],
            "seconds": 60,  # the export's schedule decides: its first poll after 2 s
            "details": {"query_id": "20261102_q1", "next_uri": "http://trino/v1/q/1"},
        },
    )

    assert submitted.status_code == 200, submitted.content
    assert submitted.json()["job"]["state"] == "pending"
    row = ExportJob.objects.get(pk=spec_of(job)["id"])
    assert (row.status, row.query_id, row.poll_count) == (JobStatus.SUBMITTED, "20261102_q1", 0)
    assert (row.next_poll_at - clock.now()).total_seconds() == 2
    others = claim(worker, "pod-b")["jobs"]  # the snapshot's other exports; not the query yet
    assert len(others) == 2 and job["id"] not in [j["id"] for j in others]
    clock.advance(2)
    polled = claim(client(), "pod-c")
    [poll] = polled["jobs"]
    assert poll["id"] == job["id"]
    assert polled["lease"] != answer["lease"]
    spec = spec_of(poll)
    assert (spec["status"], spec["query_id"], spec["next_uri"], spec["generation"]) == (
        "submitted",
        "20261102_q1",
        "http://trino/v1/q/1",
        1,  # a poll is no new claim: the query's files keep their number
    )
    stale = call(
        worker,
        f"{job['id']}/snooze",
        {"worker": "pod-a", "lease": answer["lease"], "seconds": 2, "details": {}},
    )
    assert stale.status_code == 409


def test_a_report_under_a_lease_an_operator_took_back_is_a_409_and_changes_nothing(worker, clock):
    snapshot()
    answer = claim(worker, limit=1)
    job = answer["jobs"][0]
    row_id = spec_of(job)["id"]
    engine.recover(Job.objects.get(pk=job["id"]), actor=staff("olga", operator=True), via="admin")
    row = ExportJob.objects.get(pk=row_id)
    assert (row.status, row.claimed_by) == (JobStatus.PENDING, "")
    before = state(row_id)

    for step, body in [
        ("complete", {"result": {"rows": 1, "bytes": 1, "files": ["part-g1.parquet"]}}),
        ("fail", {"error": "Trino said no", "permanent": True}),
        ("snooze", {"seconds": 2, "details": {"query_id": "q1"}}),
    ]:
        late = call(worker, f"{job['id']}/{step}", {"worker": "pod-a", "lease": answer["lease"], **body})
        assert late.status_code == 409, step
        assert late.json()["lost"]["state"] == "pending"

    assert state(row_id) == before
    again = claim(worker, "pod-b", limit=1)
    assert spec_of(again["jobs"][0])["generation"] == 2  # the next claim's files apart


def test_a_credential_for_another_queue_cannot_claim_or_report_exports(worker, clock):
    snap = snapshot()
    render = client(OTHER_TOKEN)

    assert claim(render)["jobs"] == []
    asked = call(render, "claim", {"worker": "r", "limit": 10, "queues": ["exports"]})
    assert asked.status_code == 400 and "queues" in asked.json()
    answer = claim(worker, limit=1)
    job = answer["jobs"][0]
    stolen = call(
        render,
        f"{job['id']}/fail",
        {"worker": "r", "lease": answer["lease"], "error": "x", "permanent": True},
    )
    assert stolen.status_code == 409
    assert stolen.json()["lost"]["reason"] == "no such job on this credential's queues"
    assert [row.status for row in jobs_of(snap)] == [JobStatus.CLAIMED, JobStatus.PENDING, JobStatus.PENDING]


def test_without_the_workers_token_nothing_opens(clock, settings):
    snapshot()
    anonymous, guessed, empty = APIClient(), client("guessed-token"), client("")
    operator = as_user(staff("olga", operator=True))
    api_token = APIClient()
    api_token.credentials(HTTP_AUTHORIZATION=f"Token {WORKER_TOKEN}")

    for api in (anonymous, guessed, empty, operator, api_token):
        answer = call(api, "claim", {"worker": "w", "limit": 5})
        assert answer.status_code in (401, 403)
    settings.JOBS_REMOTE_WORKERS = {}  # no credential: no worker at all
    assert call(client(), "claim", {"worker": "w", "limit": 5}).status_code in (401, 403)
    assert not ExportJob.objects.exclude(status=JobStatus.PENDING).exists()
    assert not Job.objects.exclude(state=Job.State.PENDING).exists()


def test_an_operators_cancel_in_the_console_comes_back_lost_and_fails_the_export(worker, admin_client, clock):
    snap = snapshot()
    answer = claim(worker, limit=1)
    job = answer["jobs"][0]

    cancelled = admin_client.post(f"/admin/jobs/job/{job['id']}/cancel/", {"confirm": "yes"})

    assert cancelled.status_code == 302
    beat = call(worker, "heartbeat", {"worker": "pod-a", "lease": answer["lease"], "jobs": [job["id"]]})
    assert beat.status_code == 200
    assert beat.json()["renewed"] == []
    assert beat.json()["lost"] == [{"id": job["id"], "state": "cancelled", "reason": "cancelled"}]
    row = ExportJob.objects.get(pk=spec_of(job)["id"])
    assert (row.status, row.error_message) == (JobStatus.FAILED, "Cancelled by admin")
    event = row.events.get(kind=EventKind.CANCELLED)
    assert (event.actor.username, event.via) == ("admin", "admin")
    # The snapshot's other exports run on; it fails once they are done.
    assert Snapshot.objects.get(pk=snap.pk).status == SnapshotStatus.CREATING
    late = call(
        worker,
        f"{job['id']}/complete",
        {
            "worker": "pod-a",
            "lease": answer["lease"],
            "result": {"rows": 1, "bytes": 1, "files": ["x.parquet"]},
        },
    )
    assert late.status_code == 409
    row.refresh_from_db()
    assert (row.status, row.files) == (JobStatus.FAILED, [])
