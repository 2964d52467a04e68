"""An on-call operator's morning, in a real browser, counting clicks: from the front page
to the fixed state in at most four for each of a failure with one cause (a group of
failed jobs) and a job stuck on a dead worker. Screenshots of each console page are kept
under var/test-artifacts/browser."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs.models import Job, JobEvent
from tests.base import claim_one, make_job
from tests.browser.conftest import Site, log_in, needs_chromium, screenshot
from tests.jobs.builders import failed

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
    screenshot(page, "console-front-page")
    click = Clicks(page)

    click("#overview-failures a.retry-group")
    assert "12 failed tests.noop jobs will run again" in " ".join(
        page.inner_text("#triage-retry-summary").split()
    )
    screenshot(page, "console-triage-retry-preview")
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
    screenshot(page, "console-triage")
