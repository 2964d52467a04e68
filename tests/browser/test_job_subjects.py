"""From a failure to its cause and its fix, in a real browser, counting clicks from the
front page: the operator reaches the cause in the domain's own words (a failed job's
page, which says what the job works for; a snapshot's page, whose exports link their
engine jobs) and starts the domain's fix in at most four: a failed hook, a day load that failed
after its retries, an export Trino failed, a handoff whose ingest run failed."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import jobs
from exports import services as export_services
from exports.models import EventKind, JobStatus, SnapshotStatus
from ingest.runs import services
from ingest.runs.models import RunStatus
from ingest.scraping import services as scraping
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff
from jobs.clock import ManualClock, use_clock
from jobs.models import Job
from market import batch, freshness
from market.models import DayLoad, LoadStatus, LoadTrigger, MarketAction, MarketFeed
from tests.browser.conftest import WIDTHS, Site, log_in, needs_chromium, screenshot
from tests.browser.test_operator_scenario import MAX_CLICKS, Clicks
from tests.support.base import tenant
from tests.support.drive import drain
from tests.support.exports import builders as exports_builders
from tests.support.ingest import builders

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

WIDER_THAN_SCREEN = """(selector) => Math.max(...[...document.querySelectorAll(`${selector}, ${selector} *`)]
  .map((el) => el.getBoundingClientRect().right)) - window.innerWidth"""


def look_at_the_subject(page: Any, name: str, selector: str = "#job-subject") -> None:
    """Screenshots of the page where the cause is shown, at each width: the block that
    shows it fits the screen, and nothing on the page widens it (a wide table scrolls in
    its own box)."""
    for width_name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, f"{name}-{width_name}")
        overflow = page.evaluate(WIDER_THAN_SCREEN, selector)
        assert overflow <= 0, f"{selector} is wider than the screen at {width} px, by {overflow} px"
        sideways = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert sideways <= 0, f"the page scrolls sideways by {sideways} px at {width} px"
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})


def test_a_failed_hook_is_traced_to_its_run_and_its_retry_started_in_three_clicks(site: Site, page):
    source = builders.source(
        tenant("Acme"),
        batches=1,
        hooks=[builders.exit_with(3, "record 17: price is negative")],
        max_failures=1,
    )
    run = services.start_ingest(source)
    jobs.run_until_idle()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    job = Job.objects.get(type="ingest.RunHooks", pipeline_id=run.pipeline, state="failed")
    log_in(page, site)
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    page.goto(f"{site.url}/admin/")
    click = Clicks(page)

    click("#overview-failures tr.failure-group:has-text('ingest.RunHooks') td.number a")
    click(f"#result_list a[href*='/admin/jobs/job/{job.pk}/change/']")

    subject = page.inner_text("#job-subject")
    assert f"Works for: Ingest run {run.pk} (acme/orders), batch 1" in subject
    assert "Hook hook0 on batch 1 failed with exit code 3: record 17: price is negative" in subject
    assert "Retrying this job alone would not reopen the run" in subject
    look_at_the_subject(page, "console-job-subject")

    click("#job-subject button:has-text('Retry the failed hooks')")

    page.wait_for_selector(".messagelist .success")
    assert f"Run {run.pk}: the hooks of 1 batch(es) run again." in page.inner_text(".messagelist")
    assert click.count == 3 <= MAX_CLICKS


# -- a market day load that failed after its retries --------------------------------------


@pytest.fixture
def market(settings):
    """The fake market-data API, at the market's today; the outbound rules let the test
    process's loads call it on 127.0.0.1."""
    from devtools.fakes.market_api import FakeMarket

    settings.INTAKE_HTTP_ALLOW = ["127.0.0.1"]
    with FakeMarket(instruments=20, today=freshness.market_date(timezone.now())) as server:
        yield server


def test_a_failed_day_load_is_traced_to_its_load_and_the_day_loaded_again_in_three_clicks(
    site: Site, page, market
):
    from devtools.fakes.market_api import previous_open

    feed = MarketFeed.objects.create(
        tenant=tenant("Acme"), name="cn-equities", api_url=market.url, token="demo-token"
    )
    day = previous_open(market.today)
    # The loads run here on a clock of their own, a few minutes behind the web
    # process's: the engine's backoffs (10 s, then 20 s) pass without a sleep.
    with use_clock(ManualClock(timezone.now() - timedelta(minutes=5))) as clock:
        jobs.enqueue(batch.LOAD_CALENDAR, {"feed": feed.pk}, tenant=feed.tenant_id)
        drain(clock)
        market.fail("daily", "503", times=3)
        (load,) = batch.queue_loads(feed, [day], LoadTrigger.OPERATOR)
        drain(clock)
    load.refresh_from_db()
    assert load.status == LoadStatus.FAILED
    job = Job.objects.get(pk=load.job_id, state="failed", attempts=3)
    log_in(page, site)
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    page.goto(f"{site.url}/admin/")
    click = Clicks(page)

    click("#overview-failures tr.failure-group:has-text('market.LoadDay') td.number a")
    click(f"#result_list a[href*='/admin/jobs/job/{job.pk}/change/']")

    subject = page.inner_text("#job-subject")
    assert f"Works for: Day load {day:%Y-%m-%d} of feed cn-equities" in subject
    assert "daily failed after 3 attempts: daily: HTTP 503 from the API" in subject
    assert "Retrying this job alone would not load the day" in subject
    look_at_the_subject(page, "market-load")
    click(f"#job-subject button:has-text('Load {day:%Y-%m-%d} again')")

    page.wait_for_selector(".messagelist .success")
    assert f"Gap-fill of cn-equities: queued 1 day(s): {day:%Y-%m-%d}" in page.inner_text(".messagelist")
    assert click.count == 3 <= MAX_CLICKS
    again = DayLoad.objects.exclude(pk=load.pk).get(feed=feed, trade_date=day)
    assert (again.status, again.trigger, again.requested_by.username) == (
        LoadStatus.QUEUED,
        LoadTrigger.OPERATOR,
        "root",
    )
    assert Job.objects.get(pk=again.job_id).state == "pending"
    action = MarketAction.objects.get(feed=feed, kind="gap_fill")
    assert action.actor.username == "root" and action.detail["queued"] == [day.isoformat()]


# -- a snapshot whose export failed on Trino -------------------------------------------------

WORKER_TOKEN = "browser-worker-token-" + "b" * 24
ORDERS = [
    {
        "kind": "node",
        "name": "orders",
        "sql": "SELECT id, amount FROM orders",
        "catalog": exports_builders.CATALOG,
        "columns": ["id", "amount"],
    }
]
MISSING_TABLE = "line 1:29: Table 'lake.default.orders' does not exist"


@pytest.fixture
def trino(settings, tmp_path):
    """The fake Trino with an orders table, and the test process set up as an export
    worker's host: its files go under the test's folder."""
    import pyarrow as pa

    from devtools.fakes.trino import FakeTrino

    settings.EXPORTS_STORAGE_URL = str(tmp_path / "exports")
    with FakeTrino() as fake:
        fake.load_table("orders", pa.table({"id": pa.array(range(5), pa.int64()), "amount": [1.5] * 5}))
        settings.EXPORTS_TRINO_URL = fake.url
        yield fake


@pytest.fixture
def exports_site(processes, trino, settings) -> Site:
    """The web process, serving the export workers' remote-worker API too (their token)."""
    env = processes.env(
        SERVE_STATIC="1",
        EXPORTS_WORKER_TOKEN=WORKER_TOKEN,
        EXPORTS_STORAGE_URL=settings.EXPORTS_STORAGE_URL,
        EXPORTS_TRINO_URL=trino.url,
    )
    _, port = processes.web(env)
    return Site(f"http://127.0.0.1:{port}", processes, env)


def export_pass(site: Site, trino) -> None:
    """One pass of a real export worker, here, against the site's remote-worker API and
    the fake Trino, and every export it started, to the end."""
    from exports.engines.trino import TrinoEngine, TrinoSettings
    from exports.worker import ExportWorker, WorkerSettings
    from jobs import RemoteClient

    engine = TrinoEngine(TrinoSettings(url=trino.url))
    worker = ExportWorker(
        RemoteClient(site.url, WORKER_TOKEN, worker="export-worker-1"),
        WorkerSettings(name="export-worker-1"),
        engine_for=lambda name: engine,
    )

    async def one_pass() -> None:
        await worker.run_pass()
        await worker.wait_idle()
        await worker.client.close()

    # On a thread of its own: Playwright's loop runs on this one.
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, one_pass()).result()


def test_a_failed_export_is_traced_to_its_snapshot_and_retried_in_three_clicks(
    exports_site: Site, page, trino
):
    site = exports_site
    snap = export_services.create_snapshot(
        exports_builders.mapping("sales", of=tenant("Acme"), entities=ORDERS)
    )
    trino.fail_next("TABLE_NOT_FOUND", "USER_ERROR", MISSING_TABLE)
    export_pass(site, trino)
    snap.refresh_from_db()
    export = snap.jobs.get()
    assert (snap.status, export.status) == (SnapshotStatus.FAILED, JobStatus.FAILED)
    log_in(page, site)
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    page.goto(f"{site.url}/admin/")
    click = Clicks(page)

    click('[data-figure="snapshots-failed"] a')
    click(f"#result_list a[href*='/admin/exports/snapshot/{snap.pk}/change/']")

    # The snapshot says why, in Trino's words, and so does its failed job's row.
    assert page.inner_text(".field-error .readonly").startswith(
        f"node orders: TABLE_NOT_FOUND: {MISSING_TABLE} (query "
    )
    row = page.locator(f"#job-{export.pk}")
    assert MISSING_TABLE in row.locator(".exports-job-error").inner_text()
    look_at_the_subject(page, "exports-snapshot-failed", f"#job-{export.pk} .exports-job-error")

    click(f'#job-{export.pk} button[data-operation="retry"]')

    page.wait_for_selector(".messagelist .success")
    assert f"Job {export.pk} (node orders) will run again." in page.inner_text(".messagelist")
    assert click.count == 3 <= MAX_CLICKS
    export.refresh_from_db()
    snap.refresh_from_db()
    assert (export.status, snap.status) == (JobStatus.PENDING, SnapshotStatus.CREATING)
    assert export.events.get(kind=EventKind.RETRIED).actor.username == "root"
    # The retry was the fix: the next worker pass exports the table.
    export_pass(site, trino)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY and snap.node_counts == {"orders": 5}


# -- a scrape handoff whose ingest run failed -----------------------------------------------


def test_a_failed_handoff_is_traced_through_its_runs_hook_and_retried_in_three_clicks(site: Site, page):
    listings = builders.source(
        tenant("Acme"),
        name="listings",
        kind="scraped_reference",
        config={},
        hooks=[builders.exit_with(2, "flat-7: the price is not a number")],
        max_failures=1,
    )
    scraping.sync(listings, "scrape-1", [{"external_id": "flat-7", "payload": {"price": "n/a"}}])
    jobs.run_until_idle()
    handoff = IngestionHandoff.objects.get()
    assert (handoff.status, handoff.reason_code) == (HandoffStatus.FAILED, HandoffReason.INGESTION_FAILED)
    run = handoff.ingest_run
    job = Job.objects.get(type="ingest.RunHooks", pipeline_id=run.pipeline, state="failed")
    log_in(page, site)
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    page.goto(f"{site.url}/admin/")
    click = Clicks(page)

    click("#overview-failures tr.failure-group:has-text('ingest.RunHooks') td.number a")
    click(f"#result_list a[href*='/admin/jobs/job/{job.pk}/change/']")

    subject = page.inner_text("#job-subject")
    assert (
        f"Works for: Ingest run {run.pk} (acme/listings), batch 1, handoff {handoff.pk} (flat-7)" in subject
    )
    assert "Hook hook0 on batch 1 failed with exit code 2: flat-7: the price is not a number" in subject
    assert f"Handoff {handoff.pk} (flat-7) failed: its ingest run failed" in subject
    assert "use “Retry the failed hooks” or “Retry the handoff” above" in subject
    handoff_link = page.locator(f"#job-subject a:text-is('handoff {handoff.pk} (flat-7)')")
    assert handoff_link.get_attribute("href") == f"/admin/ingest/ingestionhandoff/{handoff.pk}/change/"
    look_at_the_subject(page, "ingest-handoff")

    click("#job-subject button:has-text('Retry the handoff')")

    page.wait_for_selector(".messagelist .success")
    assert f"Ingestion handoff {handoff.pk} queued again." in page.inner_text(".messagelist")
    assert page.url.endswith(f"/admin/ingest/ingestionhandoff/{handoff.pk}/change/")
    assert click.count == 3 <= MAX_CLICKS
    handoff.refresh_from_db()
    assert (handoff.status, handoff.reason_code) == (HandoffStatus.QUEUED, HandoffReason.INGESTION_JOB_QUEUED)
    retried = handoff.transitions.get(kind=HandoffReason.RETRIED_BY_OPERATOR)
    assert retried.actor.username == "root"
    assert Job.objects.get(pk=handoff.job_id, type="ingest.IngestReference").state == "pending"
