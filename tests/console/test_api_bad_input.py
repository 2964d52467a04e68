"""Bad input to the jobs API is a 400 naming the problem, never a 500; tracebacks are for
staff; unknown API addresses answer JSON; the schema documents what the API answers."""

from __future__ import annotations

import base64
import re

import pytest
from drf_spectacular.generators import SchemaGenerator

from jobs.events import publish
from jobs.models import Job
from tests.support.base import make_job, run_next

pytestmark = pytest.mark.django_db


def cursor(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- cursors ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/jobs/", "/api/events/"])
@pytest.mark.parametrize("position", ["abc", "1.5", str(2**80)])
def test_a_cursor_whose_position_is_not_an_id_is_a_400_naming_cursor(bob, path, position):
    response = bob.get(path, {"cursor": cursor(f"p={position}")})

    assert response.status_code == 400
    assert response.json() == {"cursor": ["invalid cursor: its position is not a valid id"]}


def test_a_cursor_drf_cannot_decode_is_a_400_naming_cursor_too(bob):
    response = bob.get("/api/jobs/", {"cursor": cursor("o=first")})

    assert response.status_code == 400
    assert response.json() == {
        "cursor": ["invalid cursor: not a cursor from this list's next or previous link"]
    }


def test_the_cursors_the_api_hands_out_still_walk_the_list(alice, acme):
    for _ in range(3):
        make_job(tenant=acme)
    first = alice.get("/api/jobs/", {"page_size": 2}).json()

    second = alice.get(first["next"])

    assert second.status_code == 200 and len(second.json()["results"]) == 1


# --- datetime filters ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["2026-01-01T00:00:00+20:00", "2026-01-01T00:00:00-16:00"])
def test_a_datetime_filter_with_an_offset_postgresql_refuses_is_a_400(bob, value):
    response = bob.get("/api/jobs/", {"created_after": value})

    assert response.status_code == 400
    [message] = response.json()["created_after"]
    assert message.startswith(f"UTC offset {value[-6:]} is out of range")


def test_the_widest_offsets_postgresql_takes_are_accepted(bob):
    for value in ("2026-01-01T00:00:00+15:59", "2026-01-01T00:00:00-15:59"):
        assert bob.get("/api/events/", {"created_before": value}).status_code == 200


def test_a_datetime_beyond_year_9999_in_utc_is_a_400(bob):
    response = bob.get("/api/jobs/", {"failed_since": "9999-12-31T23:00:00-05:00"})

    assert response.status_code == 400
    assert response.json() == {"failed_since": ["year 9999 is out of range: use one from 2 to 9998"]}


@pytest.mark.parametrize(
    "path, name",
    [
        ("/api/jobs/", "created_after"),
        ("/api/jobs/", "tenant"),
        ("/api/jobs/", "pipeline"),
        ("/api/events/", "created_before"),
        ("/api/ingest/runs/", "started_after"),
        ("/v1/emission_factors", "year"),
        ("/v1/emission_factors", "type"),
        ("/v1/emission_factors", "stale"),
        ("/api/exports/snapshots/", "mapping"),
    ],
)
def test_a_typed_filter_sent_empty_is_a_400_not_no_filter(bob, path, name):
    response = bob.get(path, {name: ""})

    assert response.status_code == 400
    assert response.json() == {name: ["empty: give a value, or leave the parameter out"]}


def test_a_text_filter_sent_empty_matches_the_empty_text_as_before(bob):
    assert bob.get("/api/jobs/", {"queue": "", "type": ""}).status_code == 200


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.250+15:59",
        "2026-01-01T00:00:00-15:59",
        "0002-01-01T00:00:00+15:00",
        "9998-12-31T23:59:59-15:00",
        "2026-01-01T00:00:00+16:00",
        "0001-06-01T00:00:00Z",
        "9999-01-01T00:00:00Z",
        "",
    ],
)
def test_the_schema_and_the_server_agree_on_which_datetimes_a_filter_takes(bob, value):
    [parameter] = [
        p for p in schema()["paths"]["/api/jobs/"]["get"]["parameters"] if p["name"] == "created_after"
    ]

    answer = bob.get("/api/jobs/", {"created_after": value})

    assert answer.status_code == (200 if re.search(parameter["schema"]["pattern"], value) else 400)


# --- page sizes and ordering ------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/jobs/", "/api/events/", "/api/ingest/runs/", "/v1/emission_factors"])
@pytest.mark.parametrize("size", ["true", "", "0", "501", "1.5", "-1", "\u0663"])
def test_a_page_size_not_from_1_to_500_is_a_400_naming_it(bob, path, size):
    response = bob.get(path, {"page_size": size})

    assert response.status_code == 400
    assert response.json() == {"page_size": ["must be a whole number from 1 to 500"]}


def test_the_largest_page_size_is_taken(alice, acme):
    make_job(tenant=acme)

    response = alice.get("/api/jobs/", {"page_size": "500"})

    assert response.status_code == 200 and len(response.json()["results"]) == 1


def test_the_schema_gives_each_page_parameter_its_type_and_bounds():
    paths = schema()["paths"]

    jobs = {p["name"]: p["schema"] for p in paths["/api/jobs/"]["get"]["parameters"]}
    handoffs = {p["name"]: p["schema"] for p in paths["/scraping/{source}/handoffs"]["get"]["parameters"]}

    assert jobs["page_size"] == {"type": "integer", "minimum": 1, "maximum": 500}
    assert handoffs["limit"] == {"type": "integer", "minimum": 1, "maximum": 1000}
    assert handoffs["offset"] == {"type": "integer", "minimum": 0, "maximum": 10**9}


@pytest.mark.parametrize(
    ("ordering", "status"),
    [
        ("id", 200),
        ("-id", 200),
        ("id,-id", 200),
        ("", 200),
        (" id", 400),
        ("id,", 400),
        ("=", 400),
        ("created_at", 400),
    ],
)
def test_the_schema_and_the_server_agree_on_an_ordering(bob, ordering, status):
    [parameter] = [p for p in schema()["paths"]["/api/jobs/"]["get"]["parameters"] if p["name"] == "ordering"]

    assert bool(re.search(parameter["schema"]["pattern"], ordering)) == (status == 200)
    assert bob.get("/api/jobs/", {"ordering": ordering}).status_code == status


def test_the_enqueue_body_is_closed_in_the_schema_and_on_the_server(alice):
    body = schema()["components"]["schemas"]["Enqueue"]

    response = alice.post("/api/jobs/", {"type": "tests.noop", "priorty": 5}, format="json")

    assert body["additionalProperties"] is False
    assert response.status_code == 400
    assert response.json() == {"priorty": ["unknown field"]}


# --- bodies -------------------------------------------------------------------------------------


def test_a_deeply_nested_json_body_is_a_400_not_a_recursion_error(alice):
    body = "[" * 5_000 + "]" * 5_000

    response = alice.post("/api/jobs/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {"detail": "JSON parse error - nested deeper than 64 levels"}


def test_a_body_nested_within_the_bound_is_parsed(alice):
    payload = {"type": "tests.noop", "payload": {"n": 1, "data": {"deep": [[[["ok"]]]], "s": "[[[[[["}}}

    response = alice.post("/api/jobs/", payload, format="json")

    assert response.status_code == 201, response.json()
    assert Job.objects.get().payload["data"]["deep"] == [[[["ok"]]]]


# --- tracebacks ----------------------------------------------------------------------------------


@pytest.fixture
def crashed(acme) -> Job:
    job = make_job("tests.crash", tenant=acme)
    run_next()
    job.refresh_from_db()
    assert '  File "' in job.last_error  # the worker kept the traceback
    return job


def test_a_member_gets_the_error_message_without_the_traceback(bob, crashed):
    body = bob.get(f"/api/jobs/{crashed.pk}/").json()

    assert body["last_error"] == "RuntimeError: unexpected"
    failed = [event["message"] for event in body["history"] if event["kind"] == "retry_scheduled"]
    assert failed and all(message.endswith(": RuntimeError: unexpected") for message in failed)


def test_staff_get_the_traceback(alice, crashed):
    body = alice.get(f"/api/jobs/{crashed.pk}/").json()

    assert body["last_error"] == crashed.last_error
    assert any('  File "' in event["message"] for event in body["history"])


def test_a_member_gets_a_deliverys_error_without_the_traceback(bob, alice, acme):
    event = publish("Crashing", {}, tenant=acme)
    run_next()

    for client, traceback_shown in ((bob, False), (alice, True)):
        [delivery] = client.get(f"/api/events/{event.pk}/").json()["delivery_jobs"]
        assert delivery["last_error"].startswith("RuntimeError: unexpected")
        assert ('  File "' in delivery["last_error"]) is traceback_shown


# --- addresses and the schema -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/nope/", "/api/jobs/abc/", "/v1/nope", "/sync/nope", "/jobs/nope"])
def test_an_unknown_api_address_is_a_json_404(client, settings, path):
    settings.DEBUG = True  # where Django's own page would list every URL pattern

    for method in (client.get, client.post):
        response = method(path)
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json() == {"detail": "Not found."}


def test_a_missing_slash_is_pointed_out(client):
    response = client.get("/api/jobs")

    assert response.status_code == 404
    assert response.json() == {"detail": "Not found. Did you mean /api/jobs/ ?"}


def test_other_unknown_addresses_keep_djangos_page(client):
    assert client.get("/nope/").status_code == 404


def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def test_the_schema_allows_the_empty_error_kind_of_jobs_that_did_not_fail():
    job = schema()["components"]["schemas"]["Job"]["properties"]["error_kind"]

    assert {"$ref": "#/components/schemas/BlankEnum"} in job["oneOf"]


def test_the_schema_documents_the_error_answers():
    paths = schema()["paths"]

    assert set(paths["/api/jobs/"]["get"]["responses"]) == {"200", "400", "401"}
    assert set(paths["/api/jobs/{id}/"]["get"]["responses"]) == {"200", "401", "404"}
    assert {"400", "401", "403", "404", "409"} <= set(paths["/api/jobs/{id}/retry/"]["post"]["responses"])


def test_a_payload_with_a_nul_character_is_a_400_not_a_database_error(alice):
    response = alice.post("/api/jobs/", {"type": "tests.noop", "payload": {"a": "\u0000"}}, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "detail": "JSON parse error - a string holds a NUL character (\\u0000), which cannot be stored"
    }
    assert not Job.objects.exists()


def test_a_payload_with_a_lone_surrogate_is_a_400_naming_the_payload(alice):
    body = '{"type": "tests.noop", "payload": {"data": {"x": "\\udc80"}}}'  # valid JSON
    response = alice.post("/api/jobs/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "detail": (
            'JSON parse error - body["payload"]["data"]["x"] holds a lone surrogate (U+DC80 at '
            "position 0), which is not Unicode text"
        )
    }
    assert not Job.objects.exists()
