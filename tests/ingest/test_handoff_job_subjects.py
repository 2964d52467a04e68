"""A handoff's job page links the handoff, says why it failed and offers its retry."""

from __future__ import annotations

import html as html_lib

import pytest

from ingest.scraping.models import IngestionHandoff
from tests.ingest.test_handoff_admin import failed_sync
from tests.support.base import make_job, page, staff
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db


def test_an_ingest_reference_job_links_its_failed_handoff_and_offers_its_retry(admin_client, acme):
    listings = builders.source(acme, name="listings", kind="scraped_reference", config={})
    handoff = failed_sync(listings, "scrape-1", "ref-7", staff("alice", of=acme))
    job = make_job("ingest.IngestReference", {"handoff": handoff.pk}, tenant=acme.pk)

    text = html_lib.unescape(page(admin_client, f"/admin/jobs/job/{job.pk}/change/"))

    assert (
        f'<a href="/admin/ingest/ingestionhandoff/{handoff.pk}/change/">Handoff {handoff.pk} (ref-7)</a>'
        in text
    )
    assert handoff.last_error.splitlines()[0] in text
    assert 'name="action" value="retry_handoffs"' in text
    assert f'name="_selected_action" value="{handoff.pk}"' in text

    response = admin_client.post(
        "/admin/ingest/ingestionhandoff/",
        {"action": "retry_handoffs", "_selected_action": handoff.pk, "index": 0},
    )
    assert response.status_code == 302
    assert IngestionHandoff.objects.get(pk=handoff.pk).status != IngestionHandoff.Status.FAILED
