"""The workers' internal API: the token opens it and nothing else, and it speaks the
state machine's answers as HTTP (409 for a lost claim, 400 for a bad report)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from exports.models import ExportJob, JobStatus
from tests.support.base import as_user, staff
from tests.support.exports.builders import snapshot, write_part

pytestmark = pytest.mark.django_db
TOKEN = "worker-secret"


@pytest.fixture
def worker(settings) -> APIClient:
    settings.EXPORTS_WORKER_TOKEN = TOKEN
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    return client


def test_without_the_token_nothing_opens(settings):
    settings.EXPORTS_WORKER_TOKEN = TOKEN
    snapshot()
    for client in (APIClient(), as_user(staff(operator=True))):
        answer = client.post("/internal/exports/claim", {"worker": "w", "limit": 5}, format="json")
        assert answer.status_code in (401, 403)
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer guess")
    assert wrong.post("/internal/exports/claim", {"worker": "w", "limit": 5}, format="json").status_code in (
        401,
        403,
    )
    assert not ExportJob.objects.exclude(status=JobStatus.PENDING).exists()


def test_an_unset_token_refuses_every_worker(settings):
    settings.EXPORTS_WORKER_TOKEN = ""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer ")
    assert client.post("/internal/exports/claim", {"worker": "w", "limit": 1}, format="json").status_code in (
        401,
        403,
    )


def test_claim_report_and_finalize(worker):
    snap = snapshot()
    answer = worker.post("/internal/exports/claim", {"worker": "pod-a", "limit": 10}, format="json")
    assert answer.status_code == 200
    specs = answer.json()["jobs"]
    assert [spec["entity_name"] for spec in specs] == ["entries", "factors", "computed_with"]
    first = specs[0]
    # Datasets run on PostgreSQL, under no Trino role; each claim has its own secret.
    assert first["generation"] == 1 and first["starburst_role"] == ""
    assert len({spec["claim_token"] for spec in specs}) == 3
    assert first["column_names"] == ["id", "quantity", "classification", "created_at"]
    for spec in specs:
        write_part(spec["destination"], "part-g1.parquet", 3)
        done = worker.post(
            f"/internal/exports/jobs/{spec['id']}/report",
            {
                "status": "completed",
                "generation": spec["generation"],
                "worker": "pod-a",
                "claim_token": spec["claim_token"],
                "row_count": 3,
                "size_bytes": 10,
                "files": [spec["destination"] + "/part-g1.parquet"],
            },
            format="json",
        )
        assert done.status_code == 200, done.content
        assert done.json()["job"]["claim_token"] == ""  # said once, to its holder
    final = worker.post(f"/internal/exports/snapshots/{snap.pk}/finalize", {}, format="json")
    assert final.json() == {"status": "ready"}


def test_a_lost_claim_is_409_with_the_jobs_state(worker):
    snapshot()
    spec = worker.post("/internal/exports/claim", {"worker": "a", "limit": 1}, format="json").json()["jobs"][
        0
    ]
    answer = worker.post(
        f"/internal/exports/jobs/{spec['id']}/report",
        {"status": "submitted", "generation": 7, "worker": "a", "query_id": "q"},
        format="json",
    )
    assert answer.status_code == 409
    assert answer.json()["status"] == "claimed" and answer.json()["generation"] == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({"status": "ready", "generation": 1, "worker": "a"}, "status"),
        ({"status": "completed", "generation": 1, "worker": "a"}, "status"),
        (
            {"status": "completed", "generation": 1, "worker": "a", "row_count": -1, "size_bytes": 1},
            "row_count",
        ),
        ({"status": "failed", "generation": "x", "worker": "a"}, "generation"),
        ({"status": "failed", "generation": 1, "worker": "a" * 201}, "worker"),
    ],
)
def test_a_bad_report_is_400_naming_the_field(worker, body, field):
    snapshot()
    spec = worker.post("/internal/exports/claim", {"worker": "a", "limit": 1}, format="json").json()["jobs"][
        0
    ]
    answer = worker.post(
        f"/internal/exports/jobs/{spec['id']}/report",
        {**body, "claim_token": spec["claim_token"]},
        format="json",
    )
    assert answer.status_code == 400 and field in answer.json()


def test_unknown_jobs_and_snapshots_are_404_and_limits_are_bounded(worker):
    assert (
        worker.post(
            "/internal/exports/jobs/999999/report",
            {"status": "failed", "generation": 1, "worker": "a"},
            format="json",
        ).status_code
        == 404
    )
    assert worker.post("/internal/exports/snapshots/999999/finalize", {}, format="json").status_code == 404
    assert (
        worker.post("/internal/exports/claim", {"worker": "a", "limit": 10_000}, format="json").status_code
        == 400
    )
    snapshot()
    # A claim takes at most EXPORTS_CLAIM_LIMIT (10) whatever is asked.
    assert (
        len(
            worker.post("/internal/exports/claim", {"worker": "a", "limit": 100}, format="json").json()[
                "jobs"
            ]
        )
        == 3
    )


@pytest.mark.parametrize("token", [None, "", "guessed-token"])
def test_a_report_without_the_claims_secret_is_409_and_changes_nothing(worker, token):
    snapshot()
    spec = worker.post("/internal/exports/claim", {"worker": "a", "limit": 1}, format="json").json()["jobs"][
        0
    ]
    before = ExportJob.objects.filter(pk=spec["id"]).values().get()
    body = {
        "status": "completed",
        "generation": spec["generation"],
        "worker": "b",
        "row_count": 1,
        "size_bytes": 1,
        "files": [spec["destination"] + "/part-g1.parquet"],
    }
    if token is not None:
        body["claim_token"] = token

    answer = worker.post(f"/internal/exports/jobs/{spec['id']}/report", body, format="json")

    assert answer.status_code == 409
    assert answer.json()["status"] == "claimed" and answer.json()["generation"] == 1
    assert "does not carry the secret of the job's current claim" in answer.json()["detail"]
    assert ExportJob.objects.filter(pk=spec["id"]).values().get() == before


def test_files_outside_the_jobs_folder_are_a_400_and_nothing_changes(worker):
    snapshot()
    spec = worker.post("/internal/exports/claim", {"worker": "a", "limit": 1}, format="json").json()["jobs"][
        0
    ]
    before = ExportJob.objects.filter(pk=spec["id"]).values().get()
    answer = worker.post(
        f"/internal/exports/jobs/{spec['id']}/report",
        {
            "status": "completed",
            "generation": 1,
            "worker": "a",
            "claim_token": spec["claim_token"],
            "row_count": 1,
            "size_bytes": 1,
            "files": [spec["destination"] + "/../../../tenant-2/x.parquet"],
        },
        format="json",
    )

    assert answer.status_code == 400
    assert "is not inside the job's folder" in answer.json()["files"][0]
    assert ExportJob.objects.filter(pk=spec["id"]).values().get() == before


def test_a_poll_is_given_its_own_secret(worker, clock):
    snapshot()
    spec = worker.post("/internal/exports/claim", {"worker": "a", "limit": 1}, format="json").json()["jobs"][
        0
    ]
    worker.post(
        f"/internal/exports/jobs/{spec['id']}/report",
        {
            "status": "submitted",
            "generation": 1,
            "worker": "a",
            "claim_token": spec["claim_token"],
            "query_id": "q1",
        },
        format="json",
    )
    clock.advance(2)
    polled = worker.post("/internal/exports/pollable", {"worker": "b", "limit": 5}, format="json").json()[
        "jobs"
    ]

    assert [job["id"] for job in polled] == [spec["id"]]
    assert polled[0]["claim_token"] not in ("", spec["claim_token"])
