"""JSON from a client is refused with a 400 naming the problem when it holds a string
PostgreSQL cannot store (a lone surrogate, a NUL), wherever it arrives: the API's parser,
the scrape sync's streamed parser, the remote workers' internal API, the live pages'
WebSocket. Before, ``{"source": "\\ud800"}`` reached psycopg and answered 500."""

from __future__ import annotations

import asyncio
import html
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from rest_framework.test import APIClient

from console.streams.hub import get_hub
from console.streams.ws import JobEventsConsumer
from ingest.runs.models import IngestRun, IngestSource
from ingest.scraping.models import ScrapeReference
from jobs.models import Job
from tests.ingest.test_admin import source_form, staff_browser
from tests.support.base import as_user, granted, staff, tenant
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db

LONE = "lone surrogate"
WORKER_TOKEN = "w" * 43


def post(client: APIClient, path: str, text: str, **extra: Any) -> Any:
    return client.post(path, text.encode(), content_type="application/json", **extra)


def test_a_lone_surrogate_as_an_ingest_runs_source_is_a_400_naming_it():
    acme = tenant("Acme")
    builders.source(acme)
    answer = post(
        as_user(granted(staff(of=acme), "ingest.operate_ingestrun")),
        "/api/ingest/runs/",
        '{"source": "\\ud800"}',
    )

    assert answer.status_code == 400, answer.content
    assert answer.json() == {
        "detail": 'JSON parse error - body["source"] holds a lone surrogate '
        "(U+D800 at position 0), which is not Unicode text"
    }
    assert not IngestRun.objects.exists()


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "tests.noop", "payload": {"\\udc00": 1}}',  # a key, one level down
        '{"type": "tests.noop", "payload": {"a": [[{"b": "x\\ud83d"}]]}}',  # a high half, deep
        '{"type": "tests.noop\\ud800"}',
    ],
)
def test_a_lone_surrogate_anywhere_in_an_api_body_is_a_400(text):
    answer = post(as_user(granted(staff(operator=True), "jobs.add_job")), "/api/jobs/", text)

    assert answer.status_code == 400 and LONE in answer.json()["detail"], answer.content
    assert not Job.objects.exists()


def test_a_surrogate_pair_is_text_and_passes_the_parser():
    acme = tenant("Acme")
    builders.source(acme, name="orders \U0001f600")
    answer = post(
        as_user(granted(staff(of=acme), "ingest.operate_ingestrun")),
        "/api/ingest/runs/",
        '{"source": "orders \\ud83d\\ude00"}',
    )

    assert answer.status_code == 201, answer.content
    assert IngestRun.objects.get().source.name == "orders \U0001f600"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"scrape_run_id": "r", "references": [{"external_id": "a", "payload": {"t": "\\udfff"}}]}', LONE),
        ('{"scrape_run_id": "\\ud800", "references": []}', LONE),
        (
            '{"scrape_run_id": "r", "references": [{"external_id": "a", "payload": {"\\u0000": 1}}]}',
            "NUL character",
        ),
    ],
)
def test_the_streamed_scrape_sync_refuses_the_same_strings(text, problem):
    acme = tenant("Acme")
    builders.source(acme, name="listings", kind="scraped_reference", config={})
    answer = post(
        as_user(granted(staff(of=acme), "ingest.add_scrapereference")), "/scraping/listings/sync", text
    )

    assert answer.status_code == 400 and problem in answer.json()["detail"], answer.content
    assert not ScrapeReference.objects.exists()


def test_a_lone_surrogate_from_an_export_worker_is_a_400(settings):
    settings.JOBS_REMOTE_WORKERS = {"exports": {"token": WORKER_TOKEN, "queues": ["exports"]}}
    answer = post(
        APIClient(),
        "/internal/jobs/claim",
        '{"worker": "\\ud800", "limit": 1}',
        HTTP_AUTHORIZATION=f"Bearer {WORKER_TOKEN}",
    )

    assert answer.status_code == 400 and LONE in answer.json()["detail"], answer.content


def test_a_websocket_message_with_a_lone_surrogate_is_answered_with_an_error():
    user = staff(operator=True)

    async def main() -> list[Any]:
        ws = WebsocketCommunicator(JobEventsConsumer.as_asgi(), "/ws/jobs/")
        ws.scope["user"] = user
        try:
            assert (await ws.connect())[0]
            replies = []
            for text in ('{"subscribe": {"type": "x\\ud800"}}', "[" * 5000, "{"):
                await ws.send_to(text_data=text)
                replies.append(await ws.receive_json_from(5))
            await ws.send_to(text_data='{"subscribe": {"type": "tests.noop"}}')
            replies.append(await ws.receive_json_from(5))
            await ws.disconnect()
            return replies
        finally:
            await get_hub().stop()

    replies = asyncio.run(main())
    assert LONE in replies[0]["error"]
    assert "nested deeper than 64 levels" in replies[1]["error"]
    assert "not JSON" in replies[2]["error"]
    assert replies[3] == {"subscribed": {"type": "tests.noop"}}  # the socket still serves


@pytest.mark.parametrize(
    "extra",
    [
        "".join(f', "k{n}": 0' for n in range(100_001)),  # many fields beside the references
        ', "x": [' + ",".join(["[]"] * 100_001) + "]",  # one large field
    ],
)
def test_the_streamed_parser_bounds_the_values_it_builds_outside_the_streamed_items(extra):
    acme = tenant("Acme")
    builders.source(acme, name="listings", kind="scraped_reference", config={})
    text = '{"scrape_run_id": "r", "references": []' + extra + "}"
    answer = post(
        as_user(granted(staff(of=acme), "ingest.add_scrapereference")), "/scraping/listings/sync", text
    )

    assert answer.status_code == 400, answer.content
    assert "the body holds more than 100,000 values" in answer.json()["detail"]


@pytest.mark.parametrize(
    ("field", "text", "where"),
    [
        ("config", '{"batches": 2, "note": Infinity}', "a number JSON cannot hold"),
        ("config", '{"batches": 2, "note": [NaN]}', "a number JSON cannot hold"),
        ("config", '{"batches": 2, "note": {"a": -1e999}}', "a number JSON cannot hold"),
        ("config", '{"batches": 2, "note": "\\ud800"}', 'the value["note"] holds a lone surrogate'),
        ("hooks-0-parameters", '{"\\udc00": "1"}', "the value has a key that holds a lone surrogate"),
        (
            "hooks-0-parameters",
            '{"level": ["x", "a\\u0000b"]}',
            'the value["level"][1] holds a NUL character',
        ),
    ],
)
def test_an_admin_json_field_with_a_string_postgresql_cannot_store_is_a_form_error(field, text, where):
    browser = staff_browser("alice", tenant("Acme"))
    response = browser.post("/admin/ingest/ingestsource/add/", source_form(**{field: text}))

    assert response.status_code == 200
    assert where in html.unescape(response.content.decode())
    assert not IngestSource.objects.exists()
