"""The operators' main pages in Chromium at a laptop's width and at a phone's, each opened
after the rows it shows exist: jobs in every state (a group of many failures with one
cause, errors long enough to wrap, an unbroken URL, a long payload), deliveries, events,
workers, the schedules after one has run, ingest runs, handoffs, market feeds, snapshots
and the factors' lists. On a phone no page scrolls sideways (a list's own table may, in
its box); on a laptop every list shows all its columns beside its filters. Each page's
screenshot at both widths is kept under var/test-artifacts/browser (widths-*.png)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Schedule, Task

import jobs
from console import triage
from exports import services as exports
from exports.models import JobStatus
from ingest.runs import services as ingest
from ingest.runs.models import IngestSource
from ingest.scraping import services as scraping
from jobs import engine
from jobs.models import Job, Worker
from market.models import Dataset, MarketFeed, SourceFreshness
from tenancy.models import Tenant
from tests.browser.conftest import WIDTHS, Site, log_in, needs_chromium, screenshot
from tests.support.base import make_job
from tests.support.exports.builders import claim_jobs, mapping
from tests.support.exports.builders import report as report_export
from tests.support.factors import builders as factors
from tests.support.ingest import builders as ingest_builders
from tests.support.jobs.builders import delivered, failed, failed_delivery, failing, running, undelivered

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

LONG_ERROR = (
    "IntegrityError: duplicate key value violates unique constraint factors_entry_natural_key "
    "while copying the staging table of plane_entries.csv into the entries of module 17: "
    "Key (tenant_id, module_id, period, scope, source_reference)=(4, 17, 2024-01, 3, "
    "https://storage.example/uploads/acme-manufacturing-international/2024/plane_entries.csv#row=12345) "
    "already exists"
)
# One word wider than a phone's screen: an object's address, as a reference's id or in a payload.
UNBROKEN = "s3://conveyor-exports-acme-manufacturing-international/snapshots/" + "0123456789abcdef" * 6


def build_rows() -> dict[str, str]:
    """Rows for every page; the pages to look at, by name."""
    acme = Tenant.objects.create(name="Acme Manufacturing International", slug="acme-manufacturing")
    # What runs in this process first: running until idle runs whatever is due.
    delivery = failing()
    failed_delivery()
    delivered()
    undelivered()
    hooked = ingest_builders.source(
        acme, batches=2, size=2, max_failures=1, hooks=[ingest_builders.exit_with(3, LONG_ERROR)]
    )
    run = ingest.start_ingest(hooked)
    report = factors.report("LAB1", 2024, tenant=acme)
    factors.plane_factors(2024)
    factors.dispatch(
        factors.module(report),
        factors.csv_bytes(["quantity", "unit", "haul", "cabin"], factors.plane_rows(30)),
    )
    jobs.run_until_idle()

    # Jobs in every state: a group of many failures with one cause, and long errors.
    for n in range(14):
        failed(error=f'ConnectionError: host 10.0.3.{n} refused\n  File "handlers.py", line 12, in run')
    for _ in range(3):
        failed("factors.csv_ingest", error=LONG_ERROR, tenant=acme)
    failed("exports.CancelQuery", error=UNBROKEN)
    # A pipeline three levels deep, its last level with a long type's name in every state.
    parent = running(payload={"rows": list(range(400)), "source": UNBROKEN})
    engine.complete(parent, parent.lease_token, worker="w1")
    middle = running(parent=parent, pipeline=parent.pipeline_id)
    engine.complete(middle, middle.lease_token, worker="w1")
    child = failed("factors.emission_recalc", error=LONG_ERROR, parent=middle, pipeline=parent.pipeline_id)
    for n in range(3):
        make_job("tests.noop", {"n": n}, parent=middle, pipeline=parent.pipeline_id)
    stuck = running("factors.aggregation")
    Job.objects.filter(pk=stuck.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    engine.cancel(make_job("tests.noop", {"cancelled": True}), reason="not needed")
    Worker.objects.create(
        name="conveyor-worker-7d9f8c6b5-x2k4q-1",
        hostname="conveyor-worker-7d9f8c6b5-x2k4q",
        pid=4242,
        queues=["default", "exports", "factors-recalculation"],
        started_at=timezone.now() - timedelta(hours=3),
        last_seen_at=timezone.now(),
    )
    event = jobs.publish(
        "OrderPlaced", {"order": 3, "lines": [{"sku": f"SKU-{n}", "note": UNBROKEN} for n in range(4)]}
    )

    # The pipelines' rows: a failed scrape handoff of a URL-long reference, a feed in
    # error, a snapshot whose first job failed.
    listings = ingest_builders.source(acme, name="listings", kind="scraped_reference", config={})
    scraping.sync(listings, "scrape-7", [{"external_id": "flat-1", "payload": {"price": 1}}])
    IngestSource.objects.filter(pk=listings.pk).update(enabled=False)
    listings.refresh_from_db()
    scraping.sync(listings, "scrape-8", [{"external_id": UNBROKEN, "payload": {"price": 2}}])
    feed = MarketFeed.objects.create(
        tenant=acme, name="cn-equities", api_url="http://market.test/api/v1/daily", token="tok-secret-0001"
    )
    SourceFreshness.objects.create(
        feed=feed,
        dataset=Dataset.DAILY,
        last_success=timezone.now() - timedelta(days=1),
        last_failure=timezone.now() - timedelta(hours=1),
        last_error=LONG_ERROR,
    )
    snapshot = exports.create_snapshot(mapping(of=acme))
    report_export(claim_jobs("w1", 1)[0], JobStatus.FAILED, error_message=LONG_ERROR)

    # A schedule that has run, as django-q2 records it: its task, and the schedule's link.
    task = Task.objects.create(
        id=uuid.uuid4().hex,
        name="hotel-xray-sixteen-lima",
        func="jobs.schedules.enqueue_scheduled",
        args=("jobs.prune", "prune-finished-jobs"),
        result=42,
        started=timezone.now() - timedelta(seconds=2),
        stopped=timezone.now() - timedelta(seconds=1),
        success=True,
    )
    Schedule.objects.filter(name="conveyor:prune-finished-jobs").update(task=task.id)

    group = triage.fingerprint("tests.noop", triage.pattern("ConnectionError: host 10.0.3.0 refused"))
    return {
        "front-page": "/admin/",
        "dashboard": "/admin/jobs/job/dashboard/",
        "triage": "/admin/jobs/job/triage/",
        "triage-retry": f"/admin/jobs/job/triage/{group}/retry/",
        "jobs": "/admin/jobs/job/",
        "job": f"/admin/jobs/job/{parent.pk}/change/",
        "failed-job": f"/admin/jobs/job/{child.pk}/change/",
        "pipeline": f"/admin/jobs/job/pipeline/{parent.pipeline_id}/",
        "deliveries": "/admin/jobs/delivery/",
        "delivery": f"/admin/jobs/delivery/{delivery.pk}/change/",
        "events": "/admin/jobs/event/",
        "event": f"/admin/jobs/event/{event.pk}/change/",
        "workers": "/admin/jobs/worker/",
        "schedules": "/admin/django_q/schedule/",
        "ingest-runs": "/admin/ingest/ingestrun/",
        "ingest-run": f"/admin/ingest/ingestrun/{run.pk}/change/",
        "handoffs": "/admin/ingest/ingestionhandoff/",
        "market-feeds": "/admin/market/marketfeed/",
        "market-board": "/admin/market/marketfeed/board/",
        "snapshots": "/admin/exports/snapshot/",
        "snapshot": f"/admin/exports/snapshot/{snapshot.pk}/change/",
        "carbon-reports": "/admin/factors/carbonreport/",
        "data-entries": "/admin/factors/dataentry/",
        "emission-factors": "/admin/factors/emissionfactor/",
    }


# How far the page reaches past the screen's right edge.
WIDER_THAN_SCREEN = "() => document.documentElement.scrollWidth - window.innerWidth"
# How much of a list's table is scrolled out of sight in its own box (0 on other pages).
LIST_HIDDEN = """() => {
  const box = document.querySelector('#changelist .results');
  return box ? box.scrollWidth - box.clientWidth : 0;
}"""
# What each page shows once its scripts have drawn it.
READY = {"pipeline": "#pipeline-live:text-is('live')", "ingest-run": "#ingest-timeline"}


def test_every_main_page_fits_a_phone_and_a_laptop(site: Site, page):
    pages = build_rows()
    log_in(page, site)

    wider, hidden = {}, {}
    for width_name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            response = page.goto(f"{site.url}{path}")
            assert response.ok, (path, response.status)
            page.wait_for_selector(READY.get(name, "#footer"), state="attached")
            screenshot(page, f"widths-{name}-{width_name}")
            if width_name == "phone" and (overflow := page.evaluate(WIDER_THAN_SCREEN)) > 0.5:
                wider[name] = round(overflow)
            if width_name == "desktop" and (cut := page.evaluate(LIST_HIDDEN)) > 0:
                hidden[name] = cut

    assert wider == {}, f"pages wider than a {WIDTHS['phone']} px screen, by (px): {wider}"
    assert hidden == {}, f"lists with columns out of sight at {WIDTHS['desktop']} px, by (px): {hidden}"
    # The schedule that ran says when, where django-q2 would link to a task list.
    page.goto(f"{site.url}/admin/django_q/schedule/")
    row = page.locator("#result_list tr", has_text="prune-finished-jobs")
    assert row.locator("td.field-get_last_run").inner_text() not in ("", "-")
