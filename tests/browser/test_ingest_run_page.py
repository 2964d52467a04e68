"""An ingest run's admin page in a real browser: opened before its batches are fetched,
it follows them to the run's end from the pipeline's event stream, without a reload."""

from __future__ import annotations

import sys

import pytest

import jobs
from ingest.runs import services
from ingest.runs.models import RunStatus
from tests.browser.conftest import WIDTHS, Site, log_in, needs_chromium, screenshot, screenshots
from tests.support.base import tenant
from tests.support.ingest import builders

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

BATCHES = 4
# A hook that takes a moment, so that the page has batches in between to show.
SLOW_HOOK = [sys.executable, "-c", "import time; time.sleep(0.4)"]

# Records how many batches the timeline showed published, each time it changed.
WATCH_TIMELINE = """() => {
  window.__published = new Set();
  const note = () => window.__published.add(
    document.querySelectorAll('.ingest-batch[data-status="published"]').length);
  note();
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true});
  window.__notReloaded = true;
}"""


def test_the_run_page_follows_the_batches_live_to_the_runs_end(site: Site, page):
    source = builders.source(tenant("Acme"), batches=BATCHES, size=3, hooks=[SLOW_HOOK])
    run = services.start_ingest(source)
    log_in(page, site)
    page.goto(f"{site.url}/admin/ingest/ingestrun/{run.pk}/change/")
    page.wait_for_selector("#ingest-live:text-is('live')")
    assert page.text_content("#ingest-timeline .ingest-muted") == "No batch fetched yet."
    page.evaluate(WATCH_TIMELINE)

    # The worker knows the tests' source kind, as a deployment knows its own ingesters.
    site.processes.manage(
        "worker",
        "jobs_worker",
        env={**site.env, "JOBS_HANDLER_MODULES": "tests.support.handlers,tests.support.ingest.plugins"},
    )

    page.wait_for_function(
        "() => document.getElementById('ingest-timeline').dataset.status === 'succeeded'", timeout=40_000
    )
    assert page.locator('.ingest-batch[data-status="published"]').count() == BATCHES
    assert page.locator('.ingest-execution[data-status="succeeded"]').count() == BATCHES
    published = sorted(page.evaluate("[...window.__published]"))
    assert published[0] == 0 and published[-1] == BATCHES
    assert any(0 < count < BATCHES for count in published), published  # seen on the way
    assert page.evaluate("window.__notReloaded") is True
    assert f"{BATCHES * 3} records" in page.text_content(".ingest-summary")
    page.wait_for_selector('#ingest-live:text-is("the run\'s jobs are finished")')
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    screenshots(page, "ingest-run-succeeded")


@pytest.mark.parametrize("width", ["desktop", "phone"])
def test_a_failed_runs_page_shows_the_hooks_that_failed_and_those_its_end_settled(site: Site, page, width):
    """Batch 1's first hook fails and ends the run: its second hook, and batch 2's hooks,
    are settled as cancelled, each saying why."""
    source = builders.source(
        tenant("Acme"),
        batches=2,
        size=2,
        max_failures=1,
        hooks=[builders.exit_with(3, "row 2: no unit"), builders.PASS],
    )
    run = services.start_ingest(source)
    jobs.run_until_idle()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    log_in(page, site)
    page.set_viewport_size({"width": WIDTHS[width], "height": 900})
    page.goto(f"{site.url}/admin/ingest/ingestrun/{run.pk}/change/")
    page.wait_for_selector("#ingest-timeline")
    assert page.locator('.ingest-execution[data-status="failed"]').count() == 1
    cancelled = page.locator('.ingest-execution[data-status="cancelled"]')
    assert cancelled.count() >= 1
    assert "row 2: no unit" in page.text_content("#ingest-timeline")
    screenshot(page, f"ingest-run-failed-{width}")
