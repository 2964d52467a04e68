"""Unit sync and API ingest against a real HTTP server: good documents, and the
failures of the outside world (500, timeouts, malformed JSON, bad items)."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from factors.models import CarbonReport, DataEntry, Unit
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.support.base import operating, staff, tenant
from tests.support.factors.builders import module, plane_factors, report

pytestmark = pytest.mark.django_db

DIRECTORY = {
    "units": [
        {"code": "CHEM", "name": "Chemistry department", "parent": None, "tenant": "acme"},
        {"code": "CHEM-LAB1", "name": "Organic synthesis lab", "parent": "CHEM", "tenant": "acme"},
        {"code": "PHYS", "name": "Physics department", "parent": None, "tenant": None},
    ]
}


@pytest.fixture
def olga() -> APIClient:
    client = APIClient()
    client.force_login(operating(staff("olga", operator=True)))
    return client


@pytest.fixture
def acme():
    return tenant("Acme")


def sync(olga: APIClient, url: str, year: int = 2025):
    return olga.post("/sync/units", {"year": year, "url": url}, format="json")


def job_of(response) -> Job:
    assert response.status_code == 202, response.json()
    return Job.objects.get(pk=response.json()["job"])


# --- unit sync -------------------------------------------------------------------------------------


def test_a_unit_sync_from_a_json_endpoint_is_a_real_job_that_opens_the_years_reports(
    olga, acme, source_server, clock
):
    job = job_of(sync(olga, source_server.json("/units", DIRECTORY)))
    assert job.pk > 0 and job.type == "factors.unit_sync" and job.created_by.username == "olga"

    run_until_idle()

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert job.result | {"absent": []} == {
        "year": 2025,
        "units": 3,
        "created": 3,
        "updated": 0,
        "reports_opened": 3,
        "absent": [],
        "absent_count": 0,
    }
    lab = Unit.objects.get(code="CHEM-LAB1")
    assert (lab.parent.code, lab.tenant, lab.last_synced_job_id) == ("CHEM", acme, job.pk)
    assert CarbonReport.objects.filter(year=2025).count() == 3
    assert CarbonReport.objects.get(unit=lab).modules.count() == 3


def test_a_unit_directory_answering_500_is_retried_after_backoff(olga, acme, source_server, clock):
    url = source_server.raw("/units", b'{"error": "overloaded"}', status=500)
    job = job_of(sync(olga, url))

    run_until_idle()

    job.refresh_from_db()
    assert (job.state, job.error_kind) == (Job.State.PENDING, Job.ErrorKind.TRANSIENT)
    assert "answered 500" in job.last_error
    source_server.json("/units", DIRECTORY)
    clock.advance(3600)
    run_until_idle()
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.SUCCEEDED, 2)


def test_a_unit_directory_that_does_not_answer_in_time_is_retried(olga, source_server, clock, settings):
    settings.FACTORS_HTTP_DEADLINE_SECONDS = 0.3
    job = job_of(sync(olga, source_server.raw("/units", b"{}", delay=2)))

    run_until_idle()

    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert "did not answer within 0.3 s" in job.last_error


def test_a_unit_directory_that_trickles_is_cut_off_at_the_deadline_and_retried(
    olga, source_server, clock, settings
):
    settings.FACTORS_HTTP_DEADLINE_SECONDS = 0.5
    job = job_of(sync(olga, source_server.raw("/units", b"[" + b" " * 100 + b"]", trickle=0.1)))

    run_until_idle()

    job.refresh_from_db()
    assert (job.state, job.error_kind) == (Job.State.PENDING, Job.ErrorKind.TRANSIENT)
    assert "did not send its whole answer within 0.5 s" in job.last_error


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"units": [{"code": "A", "name": "x"', "did not send valid JSON"),
        (
            b'{"units": [{"code": "A", "name": ""}, {"code": "=B", "name": "y"}]}',
            "units[0].name: empty: a value is required; units[1].code: starts with '='",
        ),
        (b'{"units": [{"code": "A", "name": "x", "tenant": "nobody"}]}', "unknown tenant(s): nobody"),
        (
            b'{"units": [{"code": "A", "name": "x", "parent": "B"}, {"code": "B", "name": "y", '
            b'"parent": "A"}]}',
            "A: its parents form a cycle",
        ),
        (b'{"members": []}', "expected a JSON list, or an object with a 'units' list"),
    ],
)
def test_a_bad_unit_directory_fails_for_good_and_writes_nothing(olga, source_server, clock, body, reason):
    job = job_of(sync(olga, source_server.raw("/units", body)))

    run_until_idle()

    job.refresh_from_db()
    assert (job.state, job.error_kind) == (Job.State.FAILED, Job.ErrorKind.PERMANENT)
    assert reason in job.last_error
    assert not Unit.objects.exists()


def test_a_unit_directory_file_can_be_uploaded_as_csv_or_json(olga, acme, clock):
    csv_file = SimpleUploadedFile(
        "units.csv", b"code,name,parent,tenant\nCHEM,Chemistry,,acme\nCHEM-L1,Lab one,CHEM,acme\n"
    )
    assert olga.post("/sync/units", {"year": 2024, "file": csv_file}, format="multipart").status_code == 202
    json_file = SimpleUploadedFile("units.json", b'[{"code": "PHYS", "name": "Physics"}]')
    assert olga.post("/sync/units", {"year": 2025, "file": json_file}, format="multipart").status_code == 202

    run_until_idle()

    assert sorted(Unit.objects.values_list("code", flat=True)) == ["CHEM", "CHEM-L1", "PHYS"]
    assert Unit.objects.get(code="CHEM-L1").parent.code == "CHEM"


def test_a_bad_directory_file_is_refused_naming_its_rows(olga):
    bad = SimpleUploadedFile("units.csv", b"code,name\nCHEM,\n@X,Y\n")
    response = olga.post("/sync/units", {"year": 2024, "file": bad}, format="multipart")
    assert response.status_code == 400
    assert [(e["row"], e["column"]) for e in response.json()["errors"]] == [(2, "name"), (3, "code")]
    assert not Job.objects.exists()


def test_one_unit_sync_per_year_at_a_time(olga, source_server, clock):
    url = source_server.json("/units", DIRECTORY)
    first = sync(olga, url).json()
    second = sync(olga, url)
    assert (second.status_code, second.json()["job"]) == (409, first["job"])
    assert sync(olga, url, year=2026).status_code == 202


def test_only_http_urls_are_sources(olga):
    response = sync(olga, "file:///etc/passwd")
    assert response.status_code == 400
    assert response.json()["url"] == ["must be an http:// or https:// URL"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5432/",
        "http://localhost/units",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/",
    ],
)
def test_a_unit_directory_on_an_internal_address_is_refused_at_once(olga, url):
    response = sync(olga, url)
    assert response.status_code == 400
    assert response.json() == {"url": ["is not allowed: its host is not a public internet address"]}
    assert not Job.objects.exists()


def test_a_job_whose_source_is_refused_fails_for_good_without_naming_the_address(
    olga, source_server, clock, settings
):
    """The name was allowed when the sync was asked for and is not any more when the job
    runs (as when a name's DNS answer changes): the job fails, and its error, which the
    caller sees, does not say what the name resolved to. Nothing was sent to it."""
    settings.INTAKE_HTTP_ALLOW = ["localhost"]
    source_server.json("/units", DIRECTORY)
    job = job_of(sync(olga, source_server.url("/units", host="localhost")))
    settings.INTAKE_HTTP_ALLOW = []

    run_until_idle()

    job.refresh_from_db()
    assert (job.state, job.error_kind) == (Job.State.FAILED, Job.ErrorKind.PERMANENT)
    assert "is not allowed: its host is not a public internet address" in job.last_error
    assert "127.0.0.1" not in job.last_error
    assert source_server.hits == []


# --- API ingest ------------------------------------------------------------------------------------


@pytest.fixture
def travel(acme):
    plane_factors()
    return module(report(tenant=acme))


def api_ingest(olga: APIClient, travel, url: str):
    return olga.post(
        "/sync/api-ingest",
        {"report": travel.report_id, "module": "travel", "data_entry_type": "plane", "url": url},
        format="json",
    )


def test_entries_from_an_api_source_follow_the_upload_pipeline(olga, travel, source_server, clock):
    document = {
        "entries": [
            {"quantity": 120.5, "classification": {"haul": "short", "cabin": "economy"}},
            {"quantity": "800", "unit": "KM", "classification": {"haul": "Long", "cabin": "business"}},
        ]
    }
    job = job_of(api_ingest(olga, travel, source_server.json("/flights", document)))

    run_until_idle()

    assert [j.type for j in Job.objects.filter(pipeline_id=job.pipeline_id).order_by("id")] == [
        "factors.api_ingest",
        "factors.emission_recalc",
        "factors.aggregation",
    ]
    entries = list(
        DataEntry.objects.order_by("row_number").values_list(
            "source", "row_number", "quantity", "classification"
        )
    )
    assert [e[:2] for e in entries] == [("api", 1), ("api", 2)]
    assert entries[1][3] == {"haul": "long", "cabin": "business"}
    travel.refresh_from_db()
    assert travel.stats["kg_co2e"] == "254.995500"  # 120.5 × 0.151 + 800 × 0.296


def test_an_api_source_with_a_bad_entry_fails_and_writes_nothing(olga, travel, source_server, clock):
    document = [
        {"quantity": "1", "classification": {"haul": "short", "cabin": "economy"}},
        {"quantity": "1,5", "classification": {"haul": "short", "cabin": "economy"}},
    ]
    job = job_of(api_ingest(olga, travel, source_server.json("/flights", document)))

    run_until_idle()

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert "entries[1].quantity: not a number ('1,5')" in job.last_error
    assert not DataEntry.objects.exists()


def test_an_api_source_answering_500_is_retried_then_loaded_once(olga, travel, source_server, clock):
    url = source_server.raw("/flights", b"oops", status=503)
    job = job_of(api_ingest(olga, travel, url))
    run_until_idle()
    job.refresh_from_db()
    assert job.state == Job.State.PENDING and "answered 503" in job.last_error

    source_server.json(
        "/flights", [{"quantity": "2", "classification": {"haul": "short", "cabin": "economy"}}]
    )
    clock.advance(3600)
    run_until_idle()

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert DataEntry.objects.count() == 1
