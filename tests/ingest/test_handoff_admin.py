"""The scrape handoffs' admin: the handoff list with its filters, a handoff's page with its
history, the operators' retry and redrive of failed handoffs, the references and scrape runs, each
scoped to the staff user's tenant."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client

from ingest.runs.models import IngestSource
from ingest.scraping import services
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff
from tests.support.base import page, staff
from tests.support.history import history_rows
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db

HANDOFFS = "/admin/ingest/ingestionhandoff/"
REFERENCES = "/admin/ingest/scrapereference/"
SCRAPE_RUNS = "/admin/ingest/scraperun/"


def browser(user: User, *codenames: str) -> Client:
    """A logged-in browser for ``user``, granted the ingest permissions ``codenames`` (all
    of them when none is named)."""
    granted = Permission.objects.filter(content_type__app_label="ingest")
    user.user_permissions.set(granted.filter(codename__in=codenames) if codenames else granted)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice(acme) -> User:
    return staff("alice", of=acme)


@pytest.fixture
def listings(acme) -> IngestSource:
    return builders.source(acme, name="listings", kind="scraped_reference", config={})


def sync(
    source: IngestSource, scrape_run: str, external_id: str, actor: User, payload: dict | None = None
) -> IngestionHandoff:
    services.sync(
        source, scrape_run, [{"external_id": external_id, "payload": payload or {"x": 1}}], actor=actor
    )
    return IngestionHandoff.objects.filter(reference__external_id=external_id).latest("id")


def failed_sync(source: IngestSource, scrape_run: str, external_id: str, actor: User) -> IngestionHandoff:
    """A handoff whose ingestion could not be queued (its source was disabled), with the
    source enabled again, as an operator finds it before retrying."""
    IngestSource.objects.filter(pk=source.pk).update(enabled=False)
    source.refresh_from_db()
    handoff = sync(source, scrape_run, external_id, actor)
    IngestSource.objects.filter(pk=source.pk).update(enabled=True)
    source.refresh_from_db()
    assert handoff.status == HandoffStatus.FAILED
    return handoff


def change_url(handoff: IngestionHandoff) -> str:
    return f"{HANDOFFS}{handoff.pk}/change/"


def retry(client: Client, *handoffs: IngestionHandoff, reason: str = "the source is back") -> str:
    """Redrive the selection through the admin: its preview, then its confirmation."""
    selection = {"action": "redrive_handoffs", "_selected_action": [h.pk for h in handoffs]}
    preview = client.post(HANDOFFS, selection, follow=True)
    assert preview.status_code == 200
    if preview.context is None or "failed_before" not in preview.context:
        return preview.content.decode()  # refused before any preview
    bound = preview.context["failed_before"]
    response = client.post(
        HANDOFFS, {**selection, "post": "yes", "failed_before": bound, "reason": reason}, follow=True
    )
    assert response.status_code == 200
    return response.content.decode()


# --- the list ---------------------------------------------------------------------------------


def test_the_list_shows_each_handoff_with_its_reason_in_words_and_filters(alice, listings):
    queued = sync(listings, "scrape-1", "a", alice)
    failed = failed_sync(listings, "scrape-2", "b", alice)
    client = browser(alice)

    listing = page(client, HANDOFFS)
    by_status = page(client, f"{HANDOFFS}?status=failed")
    by_scrape_run = page(client, f"{HANDOFFS}?scrape_run=scrape-1")
    by_reference = page(client, f"{HANDOFFS}?q=b")

    assert change_url(queued) in listing and change_url(failed) in listing
    assert "its ingestion was queued" in listing
    assert "its ingestion could not be queued" in listing
    assert '<td class="field-scrape_run_id_display">scrape-2</td>' in listing
    assert 'class="ingest-status ingest-status-failed"' in listing
    assert "?scrape_run=scrape-1" in listing and "?scrape_run=scrape-2" in listing  # choices
    assert change_url(failed) in by_status and change_url(queued) not in by_status
    assert change_url(queued) in by_scrape_run and change_url(failed) not in by_scrape_run
    assert change_url(failed) in by_reference and change_url(queued) not in by_reference


def test_a_handoff_links_to_its_ingest_run_once_it_has_one(alice, listings):
    handoff = sync(listings, "scrape-1", "a", alice)
    services.start_ingestion(handoff.pk, tenant=handoff.tenant_id, job_id=handoff.job_id, pipeline=None)
    handoff.refresh_from_db()

    listing = page(browser(alice), HANDOFFS)

    run = handoff.ingest_run_id
    assert f'<a href="/admin/ingest/ingestrun/{run}/change/">run {run}</a>' in listing
    assert "its ingest run started" in listing


def test_a_platform_operator_sees_every_page_and_filters_by_tenant(admin_client, alice, listings, globex):
    handoff = failed_sync(listings, "scrape-1", "a", alice)
    sync(builders.source(globex, name="feed", kind="scraped_reference", config={}), "scrape-1", "g", alice)

    for url in (
        HANDOFFS,
        REFERENCES,
        SCRAPE_RUNS,
        change_url(handoff),
        f"{REFERENCES}{handoff.reference_id}/change/",
        f"{SCRAPE_RUNS}{handoff.scrape_run_id}/change/",
    ):
        page(admin_client, url)
    assert f"?tenant__id__exact={listings.tenant_id}" in page(admin_client, HANDOFFS)


# --- a handoff's page -------------------------------------------------------------------------


def test_the_handoff_page_shows_its_last_error_and_its_history_oldest_first(alice, listings):
    handoff = failed_sync(listings, "scrape-1", "a", alice)

    html = page(browser(alice), change_url(handoff))

    assert "source &#x27;listings&#x27; is disabled" in html  # the last error
    created, failed = history_rows(html)
    assert (created["change"], created["what"], created["message"], created["by"]) == (
        "∅ → queued",
        "a sync brought this payload",
        "scrape run scrape-1",
        "alice",
    )
    assert (failed["change"], failed["what"], failed["kind"]) == (
        "queued → failed",
        "its ingestion could not be queued",
        "queue_refused",
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", created["at"])
    assert 'name="_save"' not in html  # shown, never edited


# --- retrying ---------------------------------------------------------------------------------


def test_the_redrive_action_queues_a_failed_handoff_as_the_staff_user(alice, listings):
    handoff = failed_sync(listings, "scrape-1", "a", alice)

    html = retry(browser(alice), handoff)

    assert "1 handoff(s) queued again, in 1 transaction(s)." in html
    handoff.refresh_from_db()
    assert (handoff.status, handoff.reason_code) == (HandoffStatus.QUEUED, HandoffReason.INGESTION_JOB_QUEUED)
    assert handoff.job_id is not None and handoff.last_error == ""
    retried = handoff.transitions.get(kind=HandoffReason.RETRIED_BY_OPERATOR)
    assert (retried.from_status, retried.actor, retried.via) == (HandoffStatus.FAILED, alice, "admin")
    assert retried.message == "the source is back"
    queued = handoff.transitions.get(kind=HandoffReason.INGESTION_JOB_QUEUED, id__gt=retried.pk)
    assert (queued.actor, queued.via) == (alice, "admin")  # part of the same action


def test_the_redrive_action_leaves_a_handoff_that_has_not_failed_as_it_is(alice, listings):
    queued = sync(listings, "scrape-1", "a", alice)
    failed = failed_sync(listings, "scrape-1", "b", alice)
    before = list(queued.transitions.values_list("id", flat=True))

    html = retry(browser(alice), queued, failed)

    assert "1 handoff(s) queued again" in html
    assert list(queued.transitions.values_list("id", flat=True)) == before
    failed.refresh_from_db()
    assert failed.status == HandoffStatus.QUEUED


def test_one_confirmation_runs_a_bounded_number_of_transactions_and_says_what_remains(
    alice, listings, monkeypatch
):
    handoffs = [failed_sync(listings, "scrape-1", name, alice) for name in "abcde"]
    monkeypatch.setattr(services, "BATCH", 2)
    monkeypatch.setattr(services, "REQUEST_BATCHES", 2)

    html = retry(browser(alice), *handoffs)

    assert "4 handoff(s) queued again, in 2 transaction(s). 1 more match: redrive the selection again" in html
    assert IngestionHandoff.objects.filter(status=HandoffStatus.FAILED).count() == 1
    html = retry(browser(alice), *handoffs)
    assert "1 handoff(s) queued again, in 1 transaction(s)." in html
    assert not IngestionHandoff.objects.filter(status=HandoffStatus.FAILED).exists()


def test_retrying_needs_the_change_permission(acme, listings):
    viewer = staff("vera", of=acme)
    handoff = failed_sync(listings, "scrape-1", "a", viewer)
    client = browser(viewer, "view_ingestionhandoff", "view_handofftransition")

    listing = page(client, HANDOFFS)
    retry(client, handoff)

    assert "redrive_handoffs" not in listing
    assert "∅ → queued" in page(client, change_url(handoff))
    handoff.refresh_from_db()
    assert handoff.status == HandoffStatus.FAILED


def page_retry_url(handoff: IngestionHandoff) -> str:
    return f"{HANDOFFS}{handoff.pk}/operate/retry/"


def test_a_failed_handoffs_page_retries_it_with_the_reason_in_the_admin_log(alice, listings):
    handoff = failed_sync(listings, "scrape-1", "a", alice)
    client = browser(alice)
    assert f'formaction="{page_retry_url(handoff)}"' in page(client, change_url(handoff))

    response = client.post(page_retry_url(handoff), {"reason": "the source is back"}, follow=True)

    assert response.redirect_chain[-1][0] == change_url(handoff)
    html = response.content.decode()
    assert f"Ingestion handoff {handoff.pk} queued again." in html
    handoff.refresh_from_db()
    assert handoff.status == HandoffStatus.QUEUED
    retried = handoff.transitions.get(kind=HandoffReason.RETRIED_BY_OPERATOR)
    assert (retried.actor, retried.via) == (alice, "admin")
    entry = LogEntry.objects.get(object_id=str(handoff.pk))
    assert (entry.user, entry.change_message) == (
        alice,
        "Retry the handoff via the admin: the source is back",
    )
    assert page_retry_url(handoff) not in page(client, change_url(handoff))  # queued: no button


def test_the_page_button_refuses_a_handoff_that_has_not_failed_and_changes_nothing(alice, listings):
    queued = sync(listings, "scrape-1", "a", alice)
    before = list(queued.transitions.values_list("id", flat=True))

    html = browser(alice).post(page_retry_url(queued), follow=True).content.decode()

    assert f"Retry the handoff: not done. Handoff {queued.pk} is queued, not failed." in html
    assert list(queued.transitions.values_list("id", flat=True)) == before
    assert not LogEntry.objects.exists()


def test_the_page_button_needs_the_operate_permission_and_the_handoffs_tenant(acme, alice, listings, globex):
    handoff = failed_sync(listings, "scrape-1", "a", alice)
    viewer = browser(staff("vera", of=acme), "view_ingestionhandoff", "view_handofftransition")
    stranger = browser(staff("gina", of=globex))

    assert "/operate/retry/" not in page(viewer, change_url(handoff))
    assert viewer.post(page_retry_url(handoff)).status_code == 403
    assert stranger.post(page_retry_url(handoff)).status_code == 404
    assert browser(alice).get(page_retry_url(handoff)).status_code == 405
    handoff.refresh_from_db()
    assert handoff.status == HandoffStatus.FAILED


# --- references and scrape runs ---------------------------------------------------------------


def test_a_reference_shows_its_payload_as_json_and_its_handoffs(alice, listings):
    first = sync(listings, "scrape-1", "a", alice, payload={"title": "<b>flat</b>", "rooms": 3})
    handoff = failed_sync(listings, "scrape-2", "a", alice)  # a new payload of "a"
    client = browser(alice)

    listing = page(client, REFERENCES)
    html = page(client, f"{REFERENCES}{handoff.reference_id}/change/")

    assert f"{handoff.payload_hash[:12]}…" in listing and handoff.payload_hash not in listing
    assert '<td class="field-changed_in_run">scrape-2</td>' in listing
    assert '<pre class="ingest-pre">{\n  &quot;x&quot;: 1\n}</pre>' in html
    assert change_url(first) in html and change_url(handoff) in html
    assert "its ingestion could not be queued" in html


def test_the_scrape_runs_count_their_syncs_and_link_to_their_handoffs(alice, listings):
    first, second = sync(listings, "scrape-1", "a", alice), sync(listings, "scrape-1", "b", alice)
    other = sync(listings, "scrape-2", "c", alice)
    client = browser(alice)

    html = page(client, SCRAPE_RUNS)
    handoffs = page(client, f"{HANDOFFS}?scrape_run=scrape-1&source__id__exact={listings.pk}")

    assert '<td class="field-syncs">2</td>' in html
    assert '<td class="field-references_received">2</td>' in html
    assert '<td class="field-last_synced_by nowrap">alice</td>' in html
    assert f"{HANDOFFS}?scrape_run=scrape-1&amp;source__id__exact={listings.pk}" in html
    assert change_url(first) in handoffs and change_url(second) in handoffs
    assert change_url(other) not in handoffs


# --- tenants ----------------------------------------------------------------------------------


def test_another_tenants_staff_see_none_of_it_and_retry_nothing(alice, listings, globex):
    handoff = failed_sync(listings, "acme-scrape-1", "acme-listing", alice)
    client = browser(staff("gina", of=globex))

    for url in (HANDOFFS, REFERENCES, SCRAPE_RUNS):
        html = page(client, url)
        assert "acme-scrape-1" not in html and "acme-listing" not in html, url
    for url in (
        change_url(handoff),
        f"{REFERENCES}{handoff.reference_id}/change/",
        f"{SCRAPE_RUNS}{handoff.scrape_run_id}/change/",
    ):
        assert client.get(url).status_code == 302, url  # the admin's "no such object"
    retry(client, handoff)
    handoff.refresh_from_db()
    assert handoff.status == HandoffStatus.FAILED


def test_a_handoffs_job_links_to_its_page_only_for_whom_may_view_jobs(alice, listings):
    handoff = sync(listings, "acme-scrape-1", "acme-listing", alice)
    assert handoff.job_id is not None
    link = f'<a href="/admin/jobs/job/{handoff.job_id}/change/">#{handoff.job_id}</a>'

    without = page(browser(alice), change_url(handoff))
    alice.user_permissions.add(Permission.objects.get(content_type__app_label="jobs", codename="view_job"))
    client = Client()
    client.force_login(User.objects.get(pk=alice.pk))
    with_it = page(client, change_url(handoff))

    assert link not in without and f"#{handoff.job_id}" in without
    assert link in with_it


def test_the_reference_list_shows_payloads_that_were_never_handed_off(alice, listings):
    sync(listings, "scrape-1", "a", alice)
    sync(listings, "scrape-1", "b", alice)
    # As a sync stores a payload while the handoff tables are migrated back.
    IngestionHandoff.objects.filter(reference__external_id="b").delete()

    html = page(browser(alice), f"{REFERENCES}?handoff=none")

    assert "none for its payload" in html
    assert ">b<" in html and ">a<" not in html
