"""The handoff migration goes back and forth with data in place: going back drops only
the handoff tables and their timestamp trigger (references, scrape runs and ingest runs
stay), syncs keep storing references meanwhile and say handoffs are unavailable, and going
forward again brings handoffs back. The same trip leaves every market table and row alone,
and market data works meanwhile (its tables came from ingest's 0005, below the handoffs)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from ingest.runs.models import IngestRun
from ingest.scraping.models import IngestionHandoff, ScrapeReference, ScrapeRun
from market.models import DailyBar
from tests.market.test_migrations import applied, market_data, migrations_of, rows
from tests.support.base import as_user, granted, staff
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_HANDOFFS = "0002_scrape_references"


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
        assert not IngestionHandoff.objects.exists()  # the history went with the tables
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
