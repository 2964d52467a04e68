"""Rules the servers of several apps keep, stated in the OpenAPI schema, each checked on
both sides: the schema says it, and a request that breaks it gets the 400 the schema
promises. (The contract test finds a disagreement by chance; these name each one.)"""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from tests.support.base import as_user, granted, staff, tenant
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def parameter(schema: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    [found] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == name]
    return found["schema"]


def component(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return schema["components"]["schemas"][name]


def test_a_snapshot_listings_mapping_filter_states_the_ids_range(schema):
    bob = as_user(staff("bob", of=tenant("Acme"), is_staff=False))

    response = bob.get("/api/exports/snapshots/", {"mapping": "0"})

    assert parameter(schema, "/api/exports/snapshots/", "mapping") == {
        "type": "integer",
        "minimum": 1,
        "maximum": 2**63 - 1,
    }
    assert response.status_code == 400 and list(response.json()) == ["mapping"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/exports/snapshots/", "TakeSnapshot", "mapping"),
        ("/api/ingest/runs/", "StartRun", "source"),
    ],
)
def test_a_start_body_refuses_a_field_it_does_not_declare(schema, path, body, field):
    alice = as_user(
        granted(staff("alice", of=tenant("Acme")), "exports.add_snapshot", "ingest.operate_ingestrun")
    )

    response = alice.post(path, {field: 1, "colour": "blue"}, format="json")

    assert component(schema, body)["additionalProperties"] is False
    assert response.status_code == 400 and response.json() == {"colour": ["unknown field"]}


def test_a_sync_body_and_its_references_are_closed_and_ids_not_empty(schema):
    acme = tenant("Acme")
    builders.source(acme, name="listings", kind="scraped_reference", config={})
    scraper = as_user(granted(staff("scraper", of=acme), "ingest.add_scrapereference"))
    reference = component(schema, "Reference")

    response = scraper.post(
        "/scraping/listings/sync",
        {"scrape_run_id": "r1", "references": [{"external_id": "", "payload": {}}]},
        format="json",
    )

    assert component(schema, "SyncRequest")["additionalProperties"] is False
    assert reference["additionalProperties"] is False
    assert reference["properties"]["external_id"]["minLength"] == 1
    assert response.status_code == 400 and list(response.json()) == ["references[0].external_id"]


def test_the_tenant_a_handoff_listing_documents_is_taken():
    acme, globex = tenant("Acme"), tenant("Globex")
    for owner in (acme, globex):
        builders.source(owner, name="listings", kind="scraped_reference", config={})
    olga = as_user(staff("olga", operator=True))

    ambiguous = olga.get("/scraping/listings/handoffs")
    named = olga.get("/scraping/listings/handoffs", {"tenant": acme.slug})

    assert ambiguous.status_code == 400 and list(ambiguous.json()) == ["tenant"]
    assert named.status_code == 200, named.content


def test_an_enqueue_body_states_its_payload_is_an_object_and_its_keys_not_empty(schema):
    alice = as_user(granted(staff("alice", of=tenant("Acme")), "jobs.add_job"))
    enqueue = component(schema, "Enqueue")["properties"]

    response = alice.post(
        "/api/jobs/", {"type": "factors.aggregation", "payload": "nil", "unique_key": ""}, format="json"
    )

    assert enqueue["payload"]["type"] == "object"
    assert enqueue["unique_key"]["minLength"] == enqueue["concurrency_key"]["minLength"] == 1
    assert response.status_code == 400 and set(response.json()) == {"payload", "unique_key"}
