"""The scraper's API: ``POST /scraping/{source}/sync`` and ``GET /scraping/{source}/handoffs``,
token-authenticated, scoped to the caller's tenant, refusing bad input by name with
nothing written."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ingest.runs.models import IngestSource
from ingest.scraping.models import IngestionHandoff, ScrapeReference, ScrapeRun
from tests.support.base import as_user, granted, staff
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listings(acme) -> IngestSource:
    return builders.source(acme, name="listings", kind="scraped_reference", config={})


@pytest.fixture
def scraper(acme) -> APIClient:
    """The scraper service: an Acme staff account that may add references, calling with
    its API token."""
    client = APIClient()
    token = Token.objects.create(user=granted(staff("scraper", of=acme), "ingest.add_scrapereference"))
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def body(run: str, *items: tuple[str, int]) -> dict:
    return {
        "scrape_run_id": run,
        "references": [{"external_id": e, "payload": {"price": p}} for e, p in items],
    }


def sync(client: APIClient, payload, source: str = "listings", **extra):
    return client.post(f"/scraping/{source}/sync", payload, format="json", **extra)


def test_a_sync_stores_the_references_and_answers_the_handoff_counts(scraper, listings, clock):
    answer = sync(scraper, body("run-1", ("a", 1), ("b", 2)))
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "scrape_run_id": "run-1",
        "references_received": 2,
        "references_created": 2,
        "references_changed": 0,
        "references_unchanged": 0,
        "handoff_queued_count": 2,
        "handoff_completed_count": 0,
        "handoff_failed_count": 0,
        "handoff_skipped_count": 0,
        "handoff_skipped_reasons": {},
    }
    again = sync(scraper, body("run-2", ("a", 1), ("b", 3))).json()
    assert (again["handoff_queued_count"], again["handoff_skipped_count"]) == (0, 2)
    assert again["handoff_skipped_reasons"] == {"ingestion_job_already_active": 1, "payload_unchanged": 1}
    run = ScrapeRun.objects.get(run_id="run-2")
    assert (run.references_received, run.references_changed, run.last_synced_by.username) == (2, 1, "scraper")


def test_handoffs_are_listed_with_filters_and_bounded_pagination(scraper, listings, clock):
    sync(scraper, body("run-1", ("a", 1), ("b", 2), ("c", 3)))
    drain(clock)
    sync(scraper, body("run-2", ("a", 5)))
    page = scraper.get("/scraping/listings/handoffs", {"limit": 2}).json()
    assert page["count"] == 4 and len(page["results"]) == 2
    assert page["results"][0]["external_id"] == "a"  # newest first
    assert page["results"][0]["reason"] == "its ingestion was queued"
    done = scraper.get("/scraping/listings/handoffs", {"status": "completed"}).json()
    assert sorted(h["external_id"] for h in done["results"]) == ["a", "b", "c"]
    assert all(h["ingest_run_id"] for h in done["results"])
    second = scraper.get("/scraping/listings/handoffs", {"scrape_run_id": "run-2"}).json()
    assert [h["external_id"] for h in second["results"]] == ["a"]
    offset = scraper.get("/scraping/listings/handoffs", {"limit": 2, "offset": 3}).json()
    assert len(offset["results"]) == 1


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"offset": "1.5"}, "offset"),
        ({"status": "done"}, "status"),
        ({"stat": "queued"}, "stat"),
        ({"limit": "１"}, "limit"),
        ({"status": ""}, "status"),
        ({"status": " "}, "status"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "501"}, "page_size"),
        ({"cursor": "garbage"}, "cursor"),
        ({"limit": "2", "page_size": "2"}, "limit"),
    ],
)
def test_a_bad_filter_or_page_is_a_400_naming_it(scraper, listings, query, named):
    answer = scraper.get("/scraping/listings/handoffs", query)
    assert answer.status_code == 400 and named in answer.json(), answer.content


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"references": []}, "scrape_run_id"),
        ({"scrape_run_id": "r"}, "references"),
        ({"scrape_run_id": "r", "references": {}}, "references"),
        (
            {"scrape_run_id": "r", "references": [{"external_id": "a", "payload": []}]},
            "references[0].payload",
        ),
        (
            {
                "scrape_run_id": "r",
                "references": [
                    {"external_id": "a", "payload": {}},
                    {"external_id": "a", "payload": {"x": 1}},
                ],
            },
            "references[1].external_id",
        ),
        ({"scrape_run_id": "r", "references": [], "extra": 1}, "extra"),
        (["not", "an", "object"], "non_field_errors"),
    ],
)
def test_a_bad_sync_is_a_400_naming_the_problem_and_writes_nothing(scraper, listings, payload, named):
    answer = sync(scraper, payload)
    assert answer.status_code == 400 and named in answer.json(), answer.content
    assert not ScrapeReference.objects.exists() and not ScrapeRun.objects.exists()


def test_malformed_json_is_a_400(scraper, listings):
    answer = scraper.post(
        "/scraping/listings/sync", b'{"scrape_run_id": "r", "refer', content_type="application/json"
    )
    assert answer.status_code == 400 and "JSON parse error" in answer.json()["detail"]


@override_settings(INGEST_SCRAPE_MAX_REFERENCES=1000)
def test_more_references_than_the_limit_is_a_413_that_states_it(scraper, listings):
    answer = sync(scraper, body("r", *[(str(n), n) for n in range(1001)]))
    assert answer.status_code == 413
    assert "1,001 references in one sync; the limit is 1,000" in answer.json()["detail"]
    assert not ScrapeReference.objects.exists()


def test_another_tenants_source_is_a_404_and_members_cannot_sync(listings, globex, acme):
    outsider = as_user(granted(staff("gina", of=globex), "ingest.add_scrapereference"))
    assert sync(outsider, body("r", ("a", 1))).status_code == 404
    assert outsider.get("/scraping/listings/handoffs").status_code == 404
    member = as_user(staff("bob", of=acme, is_staff=False))
    assert sync(member, body("r", ("a", 1))).status_code == 403
    assert member.get("/scraping/listings/handoffs").status_code == 200
    assert APIClient().post("/scraping/listings/sync", {}, format="json").status_code == 401
    assert not ScrapeReference.objects.exists()


def test_staff_who_may_not_add_references_cannot_sync(listings, acme):
    """A sync adds references: ingest.add_scrapereference, which the admin (adding none
    by hand) does not offer; staff operating runs do not have it for that."""
    carl = as_user(granted(staff("carl", of=acme), "ingest.operate_ingestrun"))

    response = sync(carl, body("r", ("a", 1)))

    assert response.status_code == 403
    assert response.json()["detail"] == "Only staff granted ingest.add_scrapereference may do this."
    assert not ScrapeRun.objects.exists() and not ScrapeReference.objects.exists()


def test_a_source_of_another_kind_is_a_409(scraper, acme):
    builders.source(acme, name="orders")
    answer = sync(scraper, body("r", ("a", 1)), source="orders")
    assert answer.status_code == 409 and "takes no scraped references" in answer.json()["detail"]


def test_the_openapi_schema_documents_both_endpoints(scraper):
    schema = json.loads(scraper.get("/api/schema/", HTTP_ACCEPT="application/json").content)
    assert "/scraping/{source}/sync" in schema["paths"]
    parameters = {p["name"] for p in schema["paths"]["/scraping/{source}/handoffs"]["get"]["parameters"]}
    assert {"status", "scrape_run_id", "limit", "offset"} <= parameters
    assert IngestionHandoff.objects.count() == 0


def test_a_body_past_djangos_memory_limit_is_read_and_one_past_the_sync_limit_is_a_413(
    scraper, listings, settings
):
    settings.INGEST_SCRAPE_MAX_BYTES = 4096
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    fits = sync(scraper, body("r", *[(f"{n:03d}", n) for n in range(40)]))  # about 1.7 kB
    assert fits.status_code == 200, fits.content
    too_big = sync(scraper, body("r", *[(f"{n:03d}", n) for n in range(200)]))
    assert too_big.status_code == 413 and "4,096 bytes" in too_big.json()["detail"]


def test_a_hundred_thousand_references_in_one_call_are_a_413_stating_the_limit(scraper, listings):
    references = [{"external_id": str(n), "payload": {}} for n in range(100_000)]
    answer = sync(scraper, {"scrape_run_id": "r", "references": references})
    assert answer.status_code == 413
    # Refused at the first reference past the limit, before the rest is read.
    assert answer.json()["detail"].startswith("at least 50,001 references in one sync; the limit is 50,000")
    assert not ScrapeReference.objects.exists() and not ScrapeRun.objects.exists()


def test_a_nul_in_the_source_or_tenant_names_no_source(scraper, listings):
    # PostgreSQL's text holds no NUL: such a name is unknown, not a database error.
    assert sync(scraper, body("run-1", ("a", 1)), source="listings%00").status_code == 404
    answer = scraper.post("/scraping/listings/sync?tenant=acme%00", body("run-1", ("a", 1)), format="json")
    assert answer.status_code == 404, answer.content
    assert scraper.get("/scraping/listings/handoffs?tenant=%00").status_code == 404


def test_a_member_reads_a_handoffs_error_without_a_traceback_and_staff_read_it_whole(
    scraper, listings, acme, clock
):
    sync(scraper, body("run-1", ("a", 1)))
    drain(clock)
    error = (
        'stalled; the last failure: RuntimeError: boom\n  File "/srv/conveyor/ingest/x.py", '
        "line 3, in fetch\n"
    )
    IngestionHandoff.objects.update(last_error=error)  # copied from a run's reason, as it was stored
    member = as_user(staff("bob", of=acme, is_staff=False))

    assert member.get("/scraping/listings/handoffs").json()["results"][0]["last_error"] == (
        "stalled; the last failure: RuntimeError: boom"
    )
    assert scraper.get("/scraping/listings/handoffs").json()["results"][0]["last_error"] == error


def test_handoffs_come_in_keyset_pages_by_default(scraper, listings, clock):
    sync(scraper, body("run-1", *[(e, 1) for e in "abcde"]))

    first = scraper.get("/scraping/listings/handoffs", {"page_size": 2, "status": "queued"})

    assert first.status_code == 200, first.content
    page = first.json()
    assert "count" not in page and page["previous"] is None
    assert [h["external_id"] for h in page["results"]] == ["e", "d"]  # newest first
    seen = [h["id"] for h in page["results"]]
    while page["next"]:
        page = scraper.get(page["next"]).json()
        seen += [h["id"] for h in page["results"]]
    assert seen == sorted(IngestionHandoff.objects.values_list("id", flat=True), reverse=True)
    assert "count" not in scraper.get("/scraping/listings/handoffs").json()


def test_the_schema_states_every_page_parameters_bounds(scraper):
    schema = json.loads(scraper.get("/api/schema/", HTTP_ACCEPT="application/json").content)
    listing = schema["paths"]["/scraping/{source}/handoffs"]["get"]
    parameters = {p["name"]: p for p in listing["parameters"]}

    assert parameters["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000}
    assert parameters["offset"]["schema"]["minimum"] == 0
    assert parameters["page_size"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500}
    assert parameters["cursor"]["schema"] == {"type": "string"}
    assert parameters["tenant"]["schema"] == {"type": "string"}
    assert "/scraping/{source}/handoffs/redrive" in schema["paths"]


def test_a_platform_operator_names_the_tenant_of_a_shared_source_name(scraper, listings, acme, globex):
    builders.source(globex, name="listings", kind="scraped_reference", config={})
    sync(scraper, body("run-1", ("a", 1)))
    olga = as_user(staff("olga", operator=True))

    ambiguous = olga.get("/scraping/listings/handoffs")
    of_acme = olga.get("/scraping/listings/handoffs", {"tenant": "acme", "status": "queued"})
    of_globex = olga.get("/scraping/listings/handoffs", {"tenant": "globex"})

    assert ambiguous.status_code == 400 and "?tenant=<slug>" in ambiguous.json()["tenant"][0]
    assert of_acme.status_code == 200, of_acme.content
    assert [h["external_id"] for h in of_acme.json()["results"]] == ["a"]
    assert of_globex.status_code == 200 and of_globex.json()["results"] == []
    assert olga.get("/scraping/listings/handoffs", {"tenant": "initech"}).status_code == 404


def test_a_tenant_user_naming_another_tenant_learns_nothing(scraper, listings, acme, globex):
    builders.source(globex, name="listings", kind="scraped_reference", config={})
    sync(scraper, body("run-1", ("a", 1)))
    bob = as_user(staff("bob", of=acme, is_staff=False))

    own = bob.get("/scraping/listings/handoffs", {"tenant": "acme"})
    other = bob.get("/scraping/listings/handoffs", {"tenant": "globex"})
    missing = bob.get("/scraping/listings/handoffs", {"tenant": "initech"})

    assert own.status_code == 200 and [h["external_id"] for h in own.json()["results"]] == ["a"]
    # Another tenant's source answers as one that does not exist, as everywhere in the API.
    assert other.status_code == missing.status_code == 404
    assert other.json() == missing.json()
