"""Concurrent syncs of one scrape run (a scraper sending a large run in parallel chunks)
do not wait for each other: only the last statement of a sync locks the run's row.

Sync A is held mid-sync by a row lock on one of its references; sync B of the same run
must finish meanwhile, and both count once in the run.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from ingest.scraping import services
from ingest.scraping.models import ScrapeReference, ScrapeRun
from jobs.notify import raw_connection
from jobs.testing import wait_until
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)


def sync_in_thread(source, run_id: str, items: list[dict], results: dict, key: str) -> threading.Thread:
    def run() -> None:
        try:
            results[key] = services.sync(source, run_id, items)
        except Exception as exc:  # noqa: BLE001 - the test reports what the thread raised
            results[key] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def test_a_second_sync_of_a_run_finishes_while_the_first_is_still_writing(acme):
    source = builders.source(acme, name="listings", kind="scraped_reference", config={})
    services.sync(source, "warm-up", [{"external_id": "held", "payload": {"v": 0}}])
    held = ScrapeReference.objects.get(external_id="held")
    services.sync(source, "run-7", [{"external_id": "first", "payload": {"v": 1}}])

    blocker = raw_connection()
    blocker.execute("BEGIN")
    blocker.execute("SELECT id FROM ingest_scrapereference WHERE id = %s FOR UPDATE", [held.pk])
    results: dict = {}
    try:
        a = sync_in_thread(source, "run-7", [{"external_id": "held", "payload": {"v": 2}}], results, "a")
        wait_until(lambda: waiting_on_a_lock() == 1, 10, "sync A waits on the held reference")
        b = sync_in_thread(source, "run-7", [{"external_id": "other", "payload": {"v": 3}}], results, "b")
        b.join(10)
        assert not b.is_alive(), "sync B of the same run waited for sync A"
        assert "a" not in results
    finally:
        blocker.execute("COMMIT")
        blocker.close()
    a.join(10)
    assert results["b"].handoffs.queued == 1
    assert results["a"].changed == 1
    run = ScrapeRun.objects.get(source=source, run_id="run-7")
    assert (run.syncs, run.references_received, run.references_changed) == (3, 3, 3)


def test_a_refused_sync_registers_no_scrape_run(acme):
    source = builders.source(acme, name="listings", kind="scraped_reference", config={})
    with pytest.raises(services.SyncRefused):
        services.sync(source, "run-1", [{"external_id": "", "payload": {}}])
    assert not ScrapeRun.objects.exists()
