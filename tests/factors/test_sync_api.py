"""The operators' bulk endpoints: uploads start pipelines, bad files are refused whole,
a second upload of one combination is refused while the first is unfinished."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from factors.models import DataEntry, Emission, EmissionFactor, ReportModule
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.support.base import granted, staff, tenant
from tests.support.factors.builders import csv_bytes, module, plane_factors, plane_rows, report

pytestmark = pytest.mark.django_db

HEADER = ["quantity", "unit", "haul", "cabin"]


@pytest.fixture
def acme():
    return tenant("Acme")


@pytest.fixture
def alice(acme) -> APIClient:
    """Acme staff: starts bulk pipelines for Acme's reports."""
    client = APIClient()
    client.force_login(granted(staff("alice", of=acme), "factors.operate_dataentry"))
    return client


# What the platform operator of these tests may do.
OLGA_MAY = ["factors.operate_dataentry", "factors.operate_emissionfactor", "factors.operate_unit"]


@pytest.fixture
def olga() -> APIClient:
    """A platform operator: factors, units and recalculations are global."""
    client = APIClient()
    client.force_login(granted(staff("olga", operator=True), *OLGA_MAY))
    return client


@pytest.fixture
def travel(acme) -> ReportModule:
    plane_factors()
    return module(report(tenant=acme))


def upload(client: APIClient, travel: ReportModule, body: bytes, **fields):
    data = {
        "report": travel.report_id,
        "module": "travel",
        "data_entry_type": "plane",
        "file": SimpleUploadedFile("entries.csv", body, content_type="text/csv"),
        **fields,
    }
    return client.post("/sync/dispatch", data, format="multipart")


def nothing_written(upload_dir) -> bool:
    staged = list(upload_dir.glob("*")) if upload_dir.exists() else []
    return not DataEntry.objects.exists() and not Job.objects.exists() and staged == []


def test_an_upload_answers_with_its_job_and_pipeline_and_the_pipeline_shows_each_job(alice, travel, clock):
    response = upload(alice, travel, csv_bytes(HEADER, plane_rows(50)))

    assert response.status_code == 202, response.json()
    body = response.json()
    job = Job.objects.get(pk=body["job"])
    assert (job.type, str(job.pipeline_id), body["rows"]) == ("factors.csv_ingest", body["pipeline"], 50)
    assert job.created_by.username == "alice" and job.tenant_id == travel.report.unit.tenant_id
    pending = alice.get(body["pipeline_url"]).json()
    assert pending["state"] == "running"
    assert pending["modules"] == [
        {
            "id": travel.pk,
            "report": travel.report_id,
            "unit": "LAB1",
            "year": 2024,
            "module_type": "travel",
            "recalculating": True,
        }
    ]
    assert alice.get(f"/v1/carbon_reports/{travel.report_id}/modules/travel").json()["recalculating"] is True

    run_until_idle()

    done = alice.get(body["pipeline_url"]).json()
    assert done["state"] == "succeeded"
    assert [(j["type"], j["state"]) for j in done["jobs"]] == [
        ("factors.csv_ingest", "succeeded"),
        ("factors.emission_recalc", "succeeded"),
        ("factors.aggregation", "succeeded"),
    ]
    ingest = done["jobs"][0]
    assert ingest["progress"]["done"] == 50 and ingest["progress"]["total"] == 50
    assert ingest["started_at"] and ingest["finished_at"] and ingest["result"]["rows"] == 50
    assert done["modules"][0]["recalculating"] is False
    assert DataEntry.objects.filter(module=travel, source="csv").count() == 50


@pytest.mark.parametrize(
    ("body", "row", "column", "reason"),
    [
        (b"12.5,km,short,economy\n", 1, None, "missing header row"),
        (
            csv_bytes(HEADER, [["1", "km", "short", "economy"], ["1.5.2", "km", "short", "economy"]]),
            3,
            "quantity",
            "not a number",
        ),
        ("quantity,unit,haul,cabin\n1,km,short,économie\n".encode("utf-16"), 1, None, "not UTF-8"),
        (csv_bytes(HEADER, [["1", "km", '=HYPERLINK("x")', "economy"]]), 2, "haul", "formula"),
    ],
)
def test_a_malformed_file_is_refused_whole_with_row_column_and_reason(
    alice, travel, upload_dir, body, row, column, reason
):
    response = upload(alice, travel, body)

    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert (error["row"], error["column"]) == (row, column)
    assert reason in error["reason"]
    assert nothing_written(upload_dir)


def test_a_second_upload_for_the_same_combination_is_refused_while_the_first_is_unfinished(
    alice, travel, upload_dir, clock
):
    first = upload(alice, travel, csv_bytes(HEADER, plane_rows(5))).json()

    response = upload(alice, travel, csv_bytes(HEADER, plane_rows(7)))

    assert response.status_code == 409
    assert response.json()["job"] == first["job"]
    assert "already pending" in response.json()["detail"]
    assert len(list(upload_dir.glob("*"))) == 1  # the refused file was not kept
    run_until_idle()
    assert upload(alice, travel, csv_bytes(HEADER, plane_rows(7))).status_code == 202


def test_a_new_upload_replaces_the_earlier_csv_entries_and_keeps_manual_ones(alice, travel, clock):
    manual = alice.post(
        f"/v1/carbon_reports/{travel.report_id}/modules/travel/data-entries",
        {
            "data_entry_type": "plane",
            "quantity": "5",
            "classification": {"haul": "short", "cabin": "economy"},
        },
        format="json",
    )
    assert manual.status_code == 201
    upload(alice, travel, csv_bytes(HEADER, plane_rows(30)))
    run_until_idle()

    upload(alice, travel, csv_bytes(HEADER, plane_rows(10, start=100)))
    run_until_idle()

    assert DataEntry.objects.filter(source="csv").count() == 10
    assert DataEntry.objects.filter(source="manual").count() == 1
    assert Emission.objects.count() == 11
    travel.refresh_from_db()
    assert travel.stats["entries"] == 11


def test_bulk_endpoints_need_staff(travel, acme):
    member = APIClient()
    member.force_login(staff("mia", of=acme, is_staff=False))
    assert upload(member, travel, csv_bytes(HEADER, plane_rows(1))).status_code == 403


def test_staff_without_the_operate_permission_get_403_and_nothing_is_written(travel, acme, upload_dir):
    carl = APIClient()
    carl.force_login(staff("carl", of=acme))

    response = upload(carl, travel, csv_bytes(HEADER, plane_rows(1)))

    assert response.status_code == 403
    assert "factors.operate_dataentry" in response.json()["detail"]
    assert nothing_written(upload_dir)


def test_a_platform_operator_without_the_operate_permission_may_not_recalculate():
    olga = APIClient()
    olga.force_login(staff("olga", operator=True))

    response = olga.post("/sync/recalculate-emissions/plane", {}, format="json")

    assert response.status_code == 403
    assert "factors.operate_emissionfactor" in response.json()["detail"]
    assert not Job.objects.exists()


def test_global_syncs_need_a_platform_operator(alice):
    response = alice.post("/sync/recalculate-emissions/plane", {}, format="json")
    assert response.status_code == 403


def test_a_request_over_the_size_limit_is_refused_before_its_body_is_read(alice, travel, settings):
    settings.FACTORS_ENTRIES_MAX_BYTES = 1024
    response = upload(alice, travel, csv_bytes(HEADER, plane_rows(10_000)))
    assert response.status_code == 413
    assert "the limit for entries files is 1 kB: split the file" in response.json()["detail"]


def test_an_unknown_type_or_module_is_a_400_naming_it(alice, travel):
    # Both are values from fixed lists the schema gives (its enums), not rows to hide.
    for field, value in (("data_entry_type", "rocket"), ("module", "space")):
        response = upload(alice, travel, b"x", **{field: value})
        assert response.status_code == 400
        assert list(response.json()) == [field]


def test_another_tenants_report_module_is_a_404(alice, travel):
    other = report("GLOB9", tenant=tenant("Globex"))

    response = upload(alice, module(other), b"x")

    assert response.status_code == 404


# --- factors ---------------------------------------------------------------------------------------


FACTOR_HEADER = ["year", "haul", "cabin", "value", "unit", "source"]


def factor_upload(client, body: bytes, data_entry_type: str = "plane"):
    return client.post(
        f"/sync/factors/{data_entry_type}",
        {"file": SimpleUploadedFile("factors.csv", body)},
        format="multipart",
    )


def test_a_factor_upload_upserts_in_place_and_chains_the_recalculation(olga, alice, travel, clock):
    upload(alice, travel, csv_bytes(HEADER, [["100", "km", "short", "first"]]))
    run_until_idle()
    travel.refresh_from_db()
    assert travel.stats["without_factor"] == 1

    response = factor_upload(
        olga, csv_bytes(FACTOR_HEADER, [["2024", "short", "first", "0.5", "km", "DEFRA 2024"]])
    )
    assert response.status_code == 202, response.json()
    run_until_idle()

    pipeline = olga.get(response.json()["pipeline_url"]).json()
    assert [j["type"] for j in pipeline["jobs"]] == [
        "factors.factor_ingest",
        "factors.emission_recalc",
        "factors.aggregation",
    ]
    travel.refresh_from_db()
    assert (travel.stats["without_factor"], travel.stats["kg_co2e"]) == (0, "50.000000")


def test_a_factor_re_upload_with_keys_in_another_order_keeps_ids_and_marks_the_dropped_stale(
    olga, alice, travel, clock
):
    EmissionFactor.objects.all().delete()
    first = csv_bytes(
        FACTOR_HEADER,
        [
            ["2024", "short", "economy", "0.15", "km", "ADEME"],
            ["2024", "long", "business", "0.30", "km", "ADEME"],
        ],
    )
    factor_upload(olga, first)
    run_until_idle()
    ids = dict(EmissionFactor.objects.values_list("classification__haul", "pk"))
    upload(
        alice, travel, csv_bytes(HEADER, [["10", "km", "short", "economy"], ["10", "km", "long", "business"]])
    )
    run_until_idle()
    linked = dict(Emission.objects.values_list("data_entry_id", "factor_id"))

    # The same keys, columns in another order, one factor dropped and one value changed.
    second = csv_bytes(
        ["cabin", "value", "year", "unit", "haul"], [["economy", "0.20", "2024", "km", "short"]]
    )
    factor_upload(olga, second)
    run_until_idle()

    factors = {f.classification["haul"]: f for f in EmissionFactor.objects.all()}
    assert {haul: f.pk for haul, f in factors.items()} == ids  # no duplicate, same ids
    assert (factors["short"].is_stale, factors["long"].is_stale) == (False, True)
    assert dict(Emission.objects.values_list("data_entry_id", "factor_id")) == linked
    travel.refresh_from_db()
    assert travel.stats["kg_co2e"] == "5.000000"  # 10 × 0.20 + 10 × 0.30 (stale, still used)


def test_stale_tracking_follows_the_type_and_years_the_file_covers(olga, clock):
    EmissionFactor.objects.all().delete()
    factor_upload(
        olga,
        csv_bytes(
            FACTOR_HEADER,
            [
                ["2023", "short", "economy", "0.14", "km", ""],
                ["2023", "long", "business", "0.29", "km", ""],
                ["2024", "short", "economy", "0.15", "km", ""],
                ["2024", "long", "business", "0.30", "km", ""],
            ],
        ),
    )
    factor_upload(
        olga,
        csv_bytes(["year", "network", "value", "unit"], [["2024", "urban", "0.01", "km"]]),
        data_entry_type="train",
    )
    run_until_idle()

    # Only 2024, and only one of its two plane factors.
    response = factor_upload(olga, csv_bytes(FACTOR_HEADER, [["2024", "short", "economy", "0.16", "km", ""]]))
    assert response.status_code == 202, response.json()
    run_until_idle()

    stale = {
        (f.data_entry_type, f.year, f.classification.get("haul", "")): f.is_stale
        for f in EmissionFactor.objects.all()
    }
    assert stale == {
        ("plane", 2023, "short"): False,
        ("plane", 2023, "long"): False,
        ("plane", 2024, "short"): False,
        ("plane", 2024, "long"): True,
        ("train", 2024, ""): False,
    }
    job = Job.objects.filter(type="factors.factor_ingest").latest("id")
    assert (job.result["years"], job.result["stale"]) == ([2024], 1)


def test_a_refused_upload_counts_every_row_it_checked_valid_or_not(alice, travel, upload_dir):
    rows = [
        *plane_rows(3),
        ["abc", "km", "short", "economy"],
        ["1", "mi", "short", "economy"],
        *plane_rows(2, start=3),
    ]

    response = upload(alice, travel, csv_bytes(HEADER, rows))

    assert response.status_code == 400
    body = response.json()
    assert (body["rows_checked"], body["rows"], body["error_count"]) == (7, 5, 2)
    assert nothing_written(upload_dir)


def test_a_factor_file_with_a_duplicate_key_is_refused(olga, upload_dir):
    response = factor_upload(
        olga,
        csv_bytes(
            FACTOR_HEADER,
            [["2024", "short", "economy", "0.15", "km", ""], ["2024", "short", "economy", "0.2", "km", ""]],
        ),
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["reason"] == "duplicates row 2: same year, haul, cabin"
    assert not Job.objects.exists()


def test_a_recalculation_can_be_asked_for_a_type_and_year(olga, alice, travel, clock):
    upload(alice, travel, csv_bytes(HEADER, plane_rows(20)))
    run_until_idle()
    EmissionFactor.objects.filter(classification__haul="short").update(value="1")

    response = olga.post("/sync/recalculate-emissions/plane", {"year": 2024}, format="json")
    assert response.status_code == 202
    again = olga.post("/sync/recalculate-emissions/plane", {"year": 2024}, format="json")
    assert (again.status_code, again.json()["job"]) == (200, response.json()["job"])
    run_until_idle()

    job = Job.objects.get(pk=response.json()["job"])
    assert job.result["entries"] == 20 and job.created_by.username == "olga"
    assert Emission.objects.filter(factor__classification__haul="short", kg_co2e__gt=1).exists()


@pytest.mark.parametrize(
    "query, body, problem",
    [
        ("?year=-2.0e-25", {"year": None}, "A valid integer is required."),
        ("?year=1999", {}, "Ensure this value is greater than or equal to 2000."),
    ],
)
def test_a_bad_year_in_the_query_is_refused_whatever_the_body_says(olga, query, body, problem):
    response = olga.post(f"/sync/recalculate-emissions/plane{query}", body, format="json")

    assert (response.status_code, response.json()) == (400, {"year": [problem]})
    assert not Job.objects.exists()


def test_the_year_may_come_in_the_query_and_the_bodys_comes_first(olga, clock):
    response = olga.post("/sync/recalculate-emissions/plane?year=2024", {}, format="json")
    both = olga.post("/sync/recalculate-emissions/plane?year=2024", {"year": 2025}, format="json")

    assert (response.status_code, both.status_code) == (202, 202)
    assert Job.objects.get(pk=response.json()["job"]).payload["years"] == [2024]
    assert Job.objects.get(pk=both.json()["job"]).payload["years"] == [2025]


def test_a_shared_pipeline_shows_a_member_only_their_tenants_modules(olga, alice, travel, clock):
    theirs = module(report("GLOBEX-LAB", tenant=tenant("Globex")))
    for mod, client in ((travel, alice), (theirs, olga)):
        upload(client, mod, csv_bytes(HEADER, [["100", "km", "short", "first"]]))
    run_until_idle()
    started = factor_upload(
        olga, csv_bytes(FACTOR_HEADER, [["2024", "short", "first", "0.5", "km", "DEFRA 2024"]])
    ).json()
    run_until_idle()

    seen_by_olga = olga.get(started["pipeline_url"]).json()
    seen_by_alice = alice.get(started["pipeline_url"])

    assert {m["id"] for m in seen_by_olga["modules"]} >= {travel.pk, theirs.pk}
    assert seen_by_alice.status_code == 200
    assert {m["unit"] for m in seen_by_alice.json()["modules"]} == {travel.report.unit.code}
    assert "GLOBEX" not in seen_by_alice.content.decode()


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.7/entries",
        "http://localhost:8000/admin/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://2130706433/",
    ],
)
def test_an_api_ingest_from_an_internal_address_is_refused_naming_the_url_field(
    alice, travel, upload_dir, url
):
    response = alice.post(
        "/sync/api-ingest",
        {"report": travel.report_id, "module": "travel", "data_entry_type": "plane", "url": url},
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {"url": ["is not allowed: its host is not a public internet address"]}
    assert nothing_written(upload_dir)
