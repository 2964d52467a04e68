"""An on-call operator's morning, in a real browser, counting clicks: from the front page
to the fixed state in at most four for each of a failure with one cause (a group of
failed jobs) and a job stuck on a dead worker. Screenshots of each console page are kept
under var/test-artifacts/browser."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from console import triage
from jobs import engine
from jobs.models import Job, JobEvent
from tests.browser.conftest import WIDTHS, Site, log_in, needs_chromium, screenshot, screenshots
from tests.support.base import claim_one, make_job
from tests.support.jobs.builders import failed, running

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

MAX_CLICKS = 4


class Clicks:
    """Every click the operator makes goes through here, so the test can count them."""

    def __init__(self, page: Any) -> None:
        self.page, self.count = page, 0

    def __call__(self, selector: str) -> None:
        self.count += 1
        self.page.click(selector)


def failing_group(size: int) -> list[Job]:
    """Failures with one cause: their errors differ only by a host's address."""
    return [
        failed(error=f'ConnectionError: host 10.0.3.{n} refused\n  File "handlers.py", line 12, in run')
        for n in range(size)
    ]


def test_a_failure_with_one_cause_is_cleared_from_the_front_page_in_two_clicks(site: Site, page):
    group = failing_group(12)
    log_in(page, site)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{site.url}/admin/")
    assert page.inner_text('[data-figure="failed"] .figure') == "12"
    click = Clicks(page)

    click("#overview-failures a.retry-group")
    assert "12 failed tests.noop jobs will run again" in " ".join(
        page.inner_text("#triage-retry-summary").split()
    )
    screenshots(page, "console-triage-retry-preview")
    page.fill("#id_reason", "the upstream host is back")
    click("input[type=submit][value^='Yes, retry']")

    page.wait_for_selector(".messagelist .success")
    assert click.count == 2 <= MAX_CLICKS
    for job in group:
        job.refresh_from_db()
        assert job.state == Job.State.PENDING
        event = job.events.get(kind=JobEvent.Kind.RETRIED)
        assert "the upstream host is back" in event.message and event.actor.username == "root"
    assert "No job failed in the last 24h" in page.inner_text("#triage")  # nothing left to triage


# The first line of an error long enough to need several lines in any column.
LONG_ERROR = (
    "IntegrityError: duplicate key value violates unique constraint factors_entry_natural_key "
    "while copying the staging table of plane_entries.csv into the entries of module 17: "
    "Key (tenant_id, module_id, period, scope, source_reference) already exists for row 12,345, "
    "and the whole batch of 500 rows was rolled back; the ingest will be retried from that batch "
    "once the duplicate rows are removed from the upload or the existing entries are archived"
)

# Where the front page's parts sit, as the browser laid them out.
MEASURE_FRONT_PAGE = """() => {
  const box = (el) => el.getBoundingClientRect();
  const overview = document.querySelector('#operations-overview');
  const lines = (el) => {
    const style = getComputedStyle(el);
    const height = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.2;
    return box(el).height / height;
  };
  return {
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    overviewWidth: box(overview).width,
    overviewBottom: box(overview).bottom,
    appListTop: box(document.querySelector('#content-main')).top,
    figureRows: [...overview.querySelectorAll('.console-figures')].map(
      (list) => new Set([...list.children].map((tile) => Math.round(box(tile).top))).size),
    tilesRight: Math.max(...[...overview.querySelectorAll('.console-figures > li')].map(
      (tile) => box(tile).right)),
    bullets: [...overview.querySelectorAll('li')].map((li) => getComputedStyle(li).listStyleType)
      .filter((type) => type !== 'none'),
    errors: [...overview.querySelectorAll('#overview-failures tr.failure-group .pattern')].map(
      (error) => ({width: box(error.closest('td')).width, lines: lines(error)})),
  };
}"""


def test_the_front_page_reads_well_on_a_laptop_and_on_a_phone(site: Site, page):
    """The overview spans the page above the app list: each row of figures on one line
    without bullets, and each failure group's error in words, a few lines at most, the
    whole of it on hover. On a phone nothing widens the page: a wide table scrolls in
    its own box."""
    failing_group(12)
    for _ in range(3):
        failed("factors.csv_ingest", error=LONG_ERROR)
    failed("exports.CancelQuery", error="TrinoUserError: query 20261127_101500_00042_abcde not found")
    for _ in range(3):
        running("factors.csv_ingest")
    stuck = running("factors.aggregation")
    Job.objects.filter(pk=stuck.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    rescued = running("factors.unit_sync")
    Job.objects.filter(pk=rescued.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    engine.rescue(Job.objects.get(pk=rescued.pk))
    for n in range(4):
        make_job("factors.aggregation", {"module": n})
    log_in(page, site)

    for width_name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{site.url}/admin/")
        assert page.inner_text('[data-figure="failed"] .figure') == "16"
        screenshot(
            page, "console-front-page" if width_name == "desktop" else f"console-front-page-{width_name}"
        )
        laid = page.evaluate(MEASURE_FRONT_PAGE)

        assert laid["overflow"] <= 0, f"{width_name}: the page scrolls sideways by {laid['overflow']} px"
        assert laid["bullets"] == [], width_name
        assert laid["tilesRight"] <= width, width_name
        assert laid["appListTop"] >= laid["overviewBottom"], f"{width_name}: the app list beside the overview"
        assert len(laid["errors"]) == 3
        for error in laid["errors"]:
            assert error["width"] >= (320 if width_name == "desktop" else 180), (width_name, error)
            assert error["lines"] <= 3.2, (width_name, error)
        if width_name == "desktop":
            assert laid["overviewWidth"] >= width - 100, "the overview is narrower than the page"
            assert laid["figureRows"] and set(laid["figureRows"]) == {1}, laid["figureRows"]
    long_one = page.locator("#overview-failures tr.failure-group .pattern", has_text="IntegrityError")
    assert long_one.get_attribute("title") == triage.pattern(LONG_ERROR)


def test_a_job_stuck_on_a_dead_worker_is_recovered_from_the_front_page_in_three_clicks(site: Site, page):
    make_job("tests.noop")
    job, _ = claim_one("gone-worker")
    # Its worker died an hour ago, and no reaper runs here to take the job back.
    Job.objects.filter(pk=job.pk).update(
        lease_expires_at=timezone.now() - timedelta(hours=1), heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    log_in(page, site)
    page.goto(f"{site.url}/admin/")
    click = Clicks(page)

    click('[data-figure="stuck"] a')
    click(f"#result_list a[href*='/admin/jobs/job/{job.pk}/change/']")
    assert "is gone" in page.inner_text(".job-lease")
    click("button:text-is('Recover')")

    page.wait_for_selector(".messagelist .success")
    assert click.count == 3 <= MAX_CLICKS
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.events.get(kind=JobEvent.Kind.RECOVERED).actor.username == "root"


def test_the_triage_page_shows_each_group_with_its_traceback(site: Site, page):
    failing_group(3)
    log_in(page, site)
    page.goto(f"{site.url}/admin/jobs/job/triage/")
    row = page.locator("tr.failure-group").first
    assert row.get_attribute("data-count") == "3"
    row.locator("summary").click()
    assert "handlers.py" in row.locator("details pre").inner_text()
    screenshots(page, "console-triage")
