"""Bad input to the CO2 calculator's API is a 400 naming the problem, never a 500; error
reports stay small whatever the file; a pipeline's errors show tracebacks to staff only."""

from __future__ import annotations

import base64

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from jobs.models import Job
from tests.support.base import as_user, granted, make_job, run_next, staff, tenant
from tests.support.factors.builders import csv_bytes, module, plane_factors, report

pytestmark = pytest.mark.django_db

ENTRIES = "/v1/carbon_reports/{report}/modules/travel/data-entries"


@pytest.fixture
def acme():
    return tenant("Acme")


@pytest.fixture
def member(acme) -> APIClient:
    return as_user(staff("bob", of=acme, is_staff=False))


@pytest.fixture
def alice(acme) -> APIClient:
    return as_user(granted(staff("alice", of=acme), "factors.operate_dataentry"))


@pytest.fixture
def olga() -> APIClient:
    return as_user(
        granted(
            staff("olga", operator=True),
            "factors.operate_dataentry",
            "factors.operate_emissionfactor",
            "factors.operate_unit",
        )
    )


@pytest.fixture
def travel(acme):
    plane_factors()
    return module(report(tenant=acme))


@pytest.mark.parametrize("path", ["/v1/carbon_reports", ENTRIES])
def test_a_crafted_cursor_on_a_co2_list_is_a_400_naming_cursor(member, travel, path):
    crafted = base64.b64encode(b"p=abc").decode()

    response = member.get(path.format(report=travel.report_id), {"cursor": crafted})

    assert response.status_code == 400
    assert response.json() == {"cursor": ["invalid cursor: its position is not a valid id"]}


def test_a_members_deeply_nested_entry_is_a_400(member, travel):
    body = '{"classification": ' * 5_000 + "1" + "}" * 5_000

    response = member.post(ENTRIES.format(report=travel.report_id), body, content_type="application/json")

    assert response.status_code == 400
    assert "nested deeper than 64 levels" in response.json()["detail"]


@pytest.mark.parametrize("body", ["[1, 2]", '"plane"', "12"])
@pytest.mark.parametrize("path", ["/sync/api-ingest", "/sync/units", "/sync/recalculate-emissions/plane"])
def test_a_sync_body_that_is_not_an_object_is_a_400(olga, path, body):
    response = olga.post(path, body, content_type="application/json")

    assert response.status_code == 400
    [message] = response.json()["non_field_errors"]
    assert message.startswith("the body must be a JSON object, got ")


def test_a_refused_upload_of_megabyte_cells_answers_a_small_report(alice, travel):
    big = "x" * 1_000_000
    body = csv_bytes(["quantity", "unit", "haul", "cabin"], [[big, "km", "short", "economy"]] * 40)

    response = alice.post(
        "/sync/dispatch",
        {
            "report": travel.report_id,
            "module": "travel",
            "data_entry_type": "plane",
            "file": SimpleUploadedFile("entries.csv", body, content_type="text/csv"),
        },
        format="multipart",
    )

    assert response.status_code == 400
    assert len(response.content) < 20_000
    first = response.json()["errors"][0]
    assert first["reason"] == f"not a number ({'x' * 80!r}… (1,000,000 characters))"


def test_a_pipelines_errors_show_the_traceback_to_staff_only(member, alice, acme):
    job = make_job("tests.crash", tenant=acme)
    run_next()
    assert '  File "' in Job.objects.get(pk=job.pk).last_error

    shown = {
        name: client.get(f"/sync/pipelines/{job.pipeline_id}").json()["jobs"][0]["last_error"]
        for name, client in (("member", member), ("staff", alice))
    }

    assert shown["member"] == "RuntimeError: unexpected"
    assert shown["staff"].startswith("RuntimeError: unexpected\n") and '  File "' in shown["staff"]


def test_the_co2_lists_are_documented_as_the_cursor_pages_they_answer():
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]

    for path, page in (
        ("/v1/carbon_reports", "PaginatedReportList"),
        (ENTRIES.replace("travel", "{module}"), "PaginatedEntryList"),
    ):
        get = paths[path]["get"]
        assert get["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{page}"
        }
        assert {"cursor", "page_size"} <= {p["name"] for p in get["parameters"]}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/sync/units", {"year": 2024, "url": {"host": "x"}}, "url"),
        ("/sync/units", {"year": 1.5}, "year"),
        (
            "/sync/api-ingest",
            {"report": 1, "module": ["travel"], "data_entry_type": "plane", "url": "http://127.0.0.1/"},
            "module",
        ),
        (
            "/sync/api-ingest",
            {"report": 2**80, "module": "travel", "data_entry_type": "plane", "url": "http://127.0.0.1/"},
            "report",
        ),
        (
            "/sync/api-ingest",
            {"report": "REPORT", "module": "travel", "data_entry_type": "plane", "url": "http://[::1"},
            "url",
        ),
        ("/sync/recalculate-emissions/plane", {"year": True}, "year"),
    ],
)
def test_a_sync_field_of_the_wrong_kind_is_a_400_naming_it(olga, travel, path, body, field):
    if body.get("report") == "REPORT":
        body = {**body, "report": travel.report_id}

    response = olga.post(path, body, format="json")

    assert response.status_code == 400
    assert field in response.json()


def test_a_module_path_with_a_nul_character_is_a_404_not_a_database_error(member, travel):
    response = member.get(f"/v1/carbon_reports/{travel.report_id}/modules/%00/data-entries")

    assert response.status_code == 404
    assert response.json() == {"detail": "no module '\\x00'; modules are travel, energy, purchases"}


def test_an_entry_with_a_nul_character_is_a_400(member, travel):
    entry = {
        "data_entry_type": "plane",
        "quantity": "1",
        "classification": {"haul": "short\u0000", "cabin": "economy"},
    }

    response = member.post(ENTRIES.format(report=travel.report_id), entry, format="json")

    assert response.status_code == 400
    assert "NUL character" in response.json()["detail"]


def test_an_entry_type_that_is_not_a_string_is_a_400_naming_it(member, travel):
    entry = {
        "data_entry_type": ["plane"] * 100,
        "quantity": "1",
        "classification": {"haul": "short", "cabin": "economy"},
    }

    response = member.post(ENTRIES.format(report=travel.report_id), entry, format="json")

    assert response.status_code == 400
    [message] = response.json()["data_entry_type"]
    assert message.startswith("unknown type \"['plane', ") and "… (900 characters)" in message


# --- the schema says what the server takes -----------------------------------------------------


def co2_schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def parameters(operation: dict) -> dict[str, dict]:
    return {p["name"]: p["schema"] for p in operation["parameters"]}


def test_the_year_filters_and_fields_carry_their_range_in_the_schema():
    schema = co2_schema()
    paths, components = schema["paths"], schema["components"]["schemas"]
    year = {"type": "integer", "minimum": 2000, "maximum": 2100}

    assert parameters(paths["/v1/carbon_reports"]["get"])["year"] == year
    assert parameters(paths["/v1/emission_factors"]["get"])["year"] == year
    recalculate = paths["/sync/recalculate-emissions/{data_entry_type}"]["post"]
    assert parameters(recalculate)["year"] == year
    assert {k: components["UnitSyncBody"]["properties"]["year"][k] for k in year} == year


@pytest.mark.parametrize("year", ["1999", "2101", "2024.5"])
def test_a_report_year_outside_the_range_is_a_400_naming_year(member, year):
    response = member.get("/v1/carbon_reports", {"year": year})

    assert response.status_code == 400
    assert list(response.json()) == ["year"]


@pytest.mark.parametrize(
    "path", ["/sync/factors/{data_entry_type}", "/sync/recalculate-emissions/{data_entry_type}"]
)
def test_a_types_path_parameter_lists_the_types(path):
    from factors.catalog import DataEntryType

    [operation] = co2_schema()["paths"][path].values()

    assert sorted(parameters(operation)["data_entry_type"]["enum"]) == sorted(DataEntryType.values)


def test_uploads_are_documented_as_non_empty_files_and_forms_without_null():
    schema = co2_schema()
    components, paths = schema["components"]["schemas"], schema["paths"]
    recalculate = paths["/sync/recalculate-emissions/{data_entry_type}"]["post"]["requestBody"]
    form = recalculate["content"]["application/x-www-form-urlencoded"]["schema"]["$ref"]

    for body in ("DispatchBody", "FactorUploadBody", "UnitSyncBody"):
        assert components[body]["properties"]["file"] == {
            **components[body]["properties"]["file"],
            "type": "string",
            "format": "binary",
            "minLength": 1,
        }
    assert "nullable" not in components[form.rsplit("/", 1)[1]]["properties"]["year"]


def test_an_entry_body_is_closed_and_its_quantity_has_the_csv_rule(alice, travel):
    import re

    body = co2_schema()["components"]["schemas"]["EntryInput"]
    pattern = body["properties"]["quantity"]["pattern"]
    base = ENTRIES.format(report=travel.report_id)
    entry = {"data_entry_type": "plane", "classification": {"haul": "short", "cabin": "economy"}}

    assert body["additionalProperties"] is False
    for quantity in ("12", " 12.5 ", "123456789012.123456", "1.", "1e3", "1.1234567", "-1"):
        response = alice.post(base, {**entry, "quantity": quantity}, format="json")
        assert (response.status_code == 201) == bool(re.search(pattern, quantity)), quantity
