"""A handoff's job page links the handoff, says why it failed and offers its retry; so
does the page of a job of its ingest run, beside the run's own."""

from __future__ import annotations

import html as html_lib

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, RequestFactory

from ingest.scraping import services
from ingest.scraping.models import IngestionHandoff
from ingest.scraping.subjects import run_and_handoff_subjects
from jobs.models import Job
from tests.ingest.test_handoff_admin import failed_sync
from tests.support.base import make_job, page, staff
from tests.support.ingest import builders
from tests.support.ingest.running import drain

pytestmark = pytest.mark.django_db


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


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
    retry = f"/admin/ingest/ingestionhandoff/{handoff.pk}/operate/retry/"
    assert f'action="{retry}"' in text

    response = admin_client.post(retry)
    assert response.status_code == 302
    assert response["Location"] == f"/admin/ingest/ingestionhandoff/{handoff.pk}/change/"
    assert IngestionHandoff.objects.get(pk=handoff.pk).status != IngestionHandoff.Status.FAILED


# -- a run that is a handoff's ingestion: its jobs work for the handoff too --------------------


def failed_handoff_run(tenant, clock):
    """A sync whose reference's ingest run failed on its hook: the handoff failed with it."""
    listings = builders.source(
        tenant,
        name="listings",
        kind="scraped_reference",
        config={},
        hooks=[builders.exit_with(2, "flat-7: the price is not a number")],
        max_failures=1,
    )
    services.sync(listings, "scrape-1", [{"external_id": "flat-7", "payload": {"price": "n/a"}}])
    drain(clock)
    handoff = IngestionHandoff.objects.get()
    assert handoff.status == IngestionHandoff.Status.FAILED
    job = Job.objects.get(type="ingest.RunHooks", pipeline_id=handoff.ingest_run.pipeline, state="failed")
    return handoff, job


def test_a_failed_hooks_job_of_a_handoffs_run_links_the_handoff_says_it_failed_and_offers_its_retry(
    admin_client, acme, clock
):
    handoff, job = failed_handoff_run(acme, clock)
    run = handoff.ingest_run

    text = html_lib.unescape(page(admin_client, f"/admin/jobs/job/{job.pk}/change/"))

    assert (
        f'<a href="/admin/ingest/ingestrun/{run.pk}/change/">Ingest run {run.pk} (acme/listings)</a>' in text
    )
    assert (
        f'<a href="/admin/ingest/ingestionhandoff/{handoff.pk}/change/">handoff {handoff.pk} (flat-7)</a>'
        in text
    )
    # The hook's own words, then the handoff's state.
    assert (
        "Hook hook0 on batch 1 failed with exit code 2: flat-7: the price is not a number\n"
        f"Handoff {handoff.pk} (flat-7) failed: its ingest run failed"
    ) in text
    assert f'action="/admin/ingest/ingestrun/{run.pk}/retry-hooks/"' in text
    assert f'action="/admin/ingest/ingestionhandoff/{handoff.pk}/operate/retry/"' in text
    assert "use “Retry the failed hooks” or “Retry the handoff” above." in text


def test_a_running_handoffs_run_names_the_handoff_without_its_retry(admin_client, acme, clock):
    handoff, job = failed_handoff_run(acme, clock)
    IngestionHandoff.objects.filter(pk=handoff.pk).update(status=IngestionHandoff.Status.RUNNING)

    text = html_lib.unescape(page(admin_client, f"/admin/jobs/job/{job.pk}/change/"))

    assert f"Handoff {handoff.pk} (flat-7) running: its ingest run failed" in text
    assert "Retry the handoff" not in text and "Retry the failed hooks" in text


def test_who_may_not_see_handoffs_gets_the_run_alone_and_who_may_not_retry_them_no_button(acme, clock):
    handoff, job = failed_handoff_run(acme, clock)
    viewer = staff("erin", of=acme)
    viewer.user_permissions.set(
        Permission.objects.filter(content_type__app_label="jobs")
        | Permission.objects.filter(codename__in=["view_ingestrun", "operate_ingestrun"])
    )
    runs_only = page(browser(viewer), f"/admin/jobs/job/{job.pk}/change/")
    assert f"/admin/ingest/ingestrun/{handoff.ingest_run_id}/change/" in runs_only
    assert f"/admin/ingest/ingestionhandoff/{handoff.pk}/" not in runs_only
    assert "Handoff" not in runs_only and "/operate/retry/" not in runs_only

    viewer.user_permissions.add(Permission.objects.get(codename="view_ingestionhandoff"))
    viewer = type(viewer).objects.get(pk=viewer.pk)  # permissions are cached on the user
    no_retry = page(browser(viewer), f"/admin/jobs/job/{job.pk}/change/")
    assert f"/admin/ingest/ingestionhandoff/{handoff.pk}/change/" in no_retry
    assert "/operate/retry/" not in no_retry and "retry-hooks" in no_retry


def test_the_failure_groups_list_names_the_run_and_its_handoff_without_actions(admin_client, acme, clock):
    handoff, job = failed_handoff_run(acme, clock)
    request = RequestFactory().get("/admin/jobs/job/triage/")
    request.user = User.objects.get(username="admin")

    (subject,) = run_and_handoff_subjects(request, [job], False).values()

    assert subject.label == f"Ingest run {handoff.ingest_run_id} (acme/listings)"
    assert subject.parts[-1] == (
        f"handoff {handoff.pk} (flat-7)",
        f"/admin/ingest/ingestionhandoff/{handoff.pk}/change/",
    )
    assert subject.message == "" and subject.actions == ()
