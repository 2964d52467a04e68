"""The handoff migration goes back and forth with data in place: going back drops only
the handoff tables and their timestamp trigger (references, scrape runs and ingest runs
stay), syncs keep storing references meanwhile and say handoffs are unavailable, and going
forward again brings handoffs back. The same trip leaves every market table and row alone,
and market data works meanwhile (its tables came from ingest's 0005, below the handoffs)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from ingest.runs.models import IngestRun
from ingest.scraping import services as scraping
from ingest.scraping.hashing import payload_hash
from ingest.scraping.models import HandoffStatus, IngestionHandoff, ScrapeReference, ScrapeRun
from market.models import DailyBar
from tests.market.test_migrations import applied, market_data, migrations_of, rows
from tests.support.base import as_user, granted, staff
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_HANDOFFS = "0002_scrape_references"
TRIGGER = "trg_update_ingestion_handoff_timestamp"


def _exists(sql: str, name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


def _handoff_objects() -> tuple[bool, bool, bool]:
    return (
        _exists("to_regclass", "ingestion_handoffs"),
        _exists("to_regclass", "ingestion_handoff_transitions"),
        _exists("to_regprocedure", "update_ingestion_handoff_timestamp()"),
    )


@pytest.fixture
def forward_at_the_end():
    """Whatever the test does, the next one finds the schema migrated to the end."""
    yield
    call_command("migrate", "ingest", verbosity=0)


def _sync(client, run: str, price: int):
    return client.post(
        "/scraping/listings/sync",
        {
            "scrape_run_id": run,
            "references": [
                {"external_id": "a", "payload": {"price": price}},
                {"external_id": "b", "payload": {"price": price}},
            ],
        },
        format="json",
    )


def test_back_forward_and_back_again_keeps_references_runs_and_market_data(acme, clock, forward_at_the_end):
    # Market data rides along: its own test would make the same two trips, and each
    # trip costs the whole project's migration state twice.
    market_data(acme)
    market_rows = rows()
    assert all(market_rows.values())
    # Without hooks: going back past the catalogue and forward again would leave them
    # disabled entries for an operator to review (tests/ingest/test_catalogue_migration.py).
    builders.source(acme, name="listings", kind="scraped_reference", config={}, hooks=())
    scraper = as_user(granted(staff("scraper", of=acme), "ingest.add_scrapereference"))
    assert _sync(scraper, "run-1", 1).json()["handoff_queued_count"] == 2
    drain(clock)

    for _ in range(2):  # back and forward, twice
        runs = IngestRun.objects.filter(reference__isnull=False).count()
        scrape_runs = ScrapeRun.objects.count()
        status = APIClient().get("/quality/status").json()["status"]
        call_command("migrate", "ingest", BEFORE_HANDOFFS, verbosity=0)
        assert _handoff_objects() == (False, False, False)
        assert rows() == market_rows
        assert {"0001_runs", BEFORE_HANDOFFS, "0005_market_data"} == applied("ingest")
        assert applied("market") == set(migrations_of("market"))
        # Market data works meanwhile: its models, its API.
        assert DailyBar.objects.filter(feed__name="cn-equities").count() == 2
        assert APIClient().get("/quality/status").json()["status"] == status
        assert ScrapeReference.objects.count() == 2
        assert ScrapeRun.objects.count() == scrape_runs
        assert IngestRun.objects.filter(reference__isnull=False).count() == runs

        answer = _sync(scraper, "run-2", 2)
        assert answer.status_code == 200
        body = answer.json()
        assert (body["references_changed"], body["handoff_queued_count"]) == (2, None)
        assert "not migrated" in body["handoffs_unavailable"]
        assert ScrapeReference.objects.get(external_id="a").payload == {"price": 2}
        listing = scraper.get("/scraping/listings/handoffs")
        assert listing.status_code == 503 and "not migrated" in listing.json()["detail"]
        _sync(scraper, "run-2b", 1)  # back to the first payload, still without handoffs

        call_command("migrate", "ingest", verbosity=0)
        assert _handoff_objects() == (True, True, True)
        assert rows() == market_rows
        assert "0010_market_data_moves_out" in applied("ingest")
        # The history went with the tables; what was stored meanwhile is handed off, by
        # the migration (waiting for no job yet), then by the sweep.
        handed = IngestionHandoff.objects.select_related("reference")
        assert sorted(
            (h.reference.external_id, h.payload_hash == h.reference.payload_hash, h.status, h.job_id)
            for h in handed
        ) == [("a", True, "queued", None), ("b", True, "queued", None)]
        assert {t.via for h in handed for t in h.transitions.all()} == {"migration"}
        assert scraping.queue_waiting(settled_for=timedelta(0)) == 2
        drain(clock)
        assert set(IngestionHandoff.objects.values_list("status", flat=True)) == {"completed"}
        assert _sync(scraper, "run-3", 3).json()["handoff_queued_count"] == 2
        drain(clock)
        assert set(IngestionHandoff.objects.values_list("status", flat=True)) == {"completed"}


def test_the_database_keeps_a_handoffs_updated_time(acme, clock):
    builders.source(acme, name="listings", kind="scraped_reference", config={})
    _sync(as_user(granted(staff("scraper", of=acme), "ingest.add_scrapereference")), "run-1", 1)
    handoff = IngestionHandoff.objects.first()
    IngestionHandoff.objects.filter(pk=handoff.pk).update(attempts=2)  # no updated_at given
    handoff.refresh_from_db()
    assert handoff.updated_at > handoff.created_at  # the trigger's time, not the test clock's


def test_forward_migration_rehashes_stored_payloads_as_jcs_and_they_keep_deduplicating(
    acme, clock, forward_at_the_end
):
    source = builders.source(acme, name="listings", kind="scraped_reference", config={})
    source.enabled = False
    source.save()
    scraping.sync(source, "run-1", [{"external_id": "a", "payload": {"price": 1.0}}])
    source.enabled = True
    source.save()
    # As syncs stored it before RFC 8785: the hash of Python's writing of the payload.
    legacy = hashlib.sha256(b'{"price":1.0}').hexdigest()
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE ingestion_handoffs DISABLE TRIGGER trg_update_ingestion_handoff_timestamp"
        )
        ScrapeReference.objects.update(payload_hash=legacy)
        IngestionHandoff.objects.update(payload_hash=legacy)
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no trigger event pending for the ALTER
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute("ALTER TABLE ingestion_handoffs ENABLE TRIGGER " + TRIGGER)
    before = IngestionHandoff.objects.get()
    assert before.status == HandoffStatus.FAILED

    call_command("migrate", "ingest", "0012_history_vocabulary", verbosity=0)
    call_command("migrate", "ingest", verbosity=0)

    after = IngestionHandoff.objects.get()
    assert ScrapeReference.objects.get().payload_hash == after.payload_hash == payload_hash({"price": 1})
    assert after.updated_at == before.updated_at
    again = scraping.sync(source, "run-2", [{"external_id": "a", "payload": {"price": 1}}])
    assert (again.unchanged, again.handoffs.failed, again.handoffs.queued) == (1, 1, 0)
    assert scraping.preview_redrive(scraping.RedriveFilter(source)).count == 1
