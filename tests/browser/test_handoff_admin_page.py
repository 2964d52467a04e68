"""An operator in a real browser finds a failed scrape handoff by its filter, reads why it
failed, redrives it from the list (a preview, then a reason), and finds the redrive in
its history, by name."""

from __future__ import annotations

import pytest

from ingest.runs.models import IngestSource
from ingest.scraping import services
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff
from tests.browser.conftest import Site, log_in, needs_chromium, screenshots
from tests.support.base import tenant
from tests.support.ingest import builders

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]


def test_an_operator_filters_failed_handoffs_retries_one_and_sees_it_in_the_history(site: Site, page):
    source = builders.source(tenant("Acme"), name="listings", kind="scraped_reference", config={})
    services.sync(source, "scrape-7", [{"external_id": "flat-1", "payload": {"price": 1}}])
    IngestSource.objects.filter(pk=source.pk).update(enabled=False)
    source.refresh_from_db()
    services.sync(source, "scrape-8", [{"external_id": "flat-2", "payload": {"price": 2}}])
    IngestSource.objects.filter(pk=source.pk).update(enabled=True)
    failed = IngestionHandoff.objects.get(reference__external_id="flat-2")

    operator = log_in(page, site)
    page.goto(f"{site.url}/admin/ingest/ingestionhandoff/?status__exact=failed")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    assert "its ingestion could not be queued" in rows.first.inner_text()

    rows.first.locator("input.action-select").check()
    page.select_option("select[name=action]", "redrive_handoffs")
    page.click("button[name=index]")
    assert "1 failed handoff will be queued again" in page.inner_text("#redrive-count")
    page.fill("#id_reason", "the source is back")
    screenshots(page, "handoff-redrive-preview")
    page.click("input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "1 handoff(s) queued again" in page.inner_text(".messagelist")

    page.goto(f"{site.url}/admin/ingest/ingestionhandoff/{failed.pk}/change/")
    history = page.inner_text("body")
    assert "source 'listings' is disabled" in history
    assert "an operator queued it again" in history
    failed.refresh_from_db()
    assert (failed.status, failed.reason_code) == (HandoffStatus.QUEUED, HandoffReason.INGESTION_JOB_QUEUED)
    retried = failed.transitions.get(kind=HandoffReason.RETRIED_BY_OPERATOR)
    assert retried.actor == operator
    screenshots(page, "handoff-retried")
