"""A snapshot's admin page in a real browser: an operator reads a failed job's error in
the jobs table, clicks its "Retry" button, and the page comes back saying so, the job
pending again and the retry in its history under the operator's name."""

from __future__ import annotations

import pytest

from exports import services
from exports.models import EventKind, JobStatus, SnapshotStatus
from tests.browser.conftest import Site, log_in, needs_chromium, screenshots
from tests.support.base import tenant
from tests.support.exports.builders import claim_jobs, mapping, report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]


def test_an_operator_retries_a_failed_job_from_the_snapshot_page(site: Site, page):
    snap = services.create_snapshot(mapping(of=tenant("Acme")))
    job = claim_jobs("w1", 1)[0]
    report(job, JobStatus.FAILED, error_message="Query exceeded the memory limit")
    operator = log_in(page, site)

    page.goto(f"{site.url}/admin/exports/snapshot/{snap.pk}/change/")
    row = page.locator(f"#job-{job.pk}")
    assert row.get_attribute("data-status") == "failed"
    assert row.locator(".exports-job-error").text_content() == "Query exceeded the memory limit"
    row.locator('button[data-operation="retry"]').click()

    page.wait_for_selector(".messagelist .success")
    assert page.text_content(".messagelist .success") == (f"Job {job.pk} (node entries) will run again.")
    assert page.locator(f"#job-{job.pk}").get_attribute("data-status") == "pending"
    assert page.locator(f'#job-{job.pk} button[data-operation="retry"]').count() == 0
    page.click(f"#job-{job.pk}-history summary")
    retried = page.locator(f'#job-{job.pk}-history tr[data-kind="retried"] td')
    assert retried.nth(5).text_content() == "root"  # the "by" column
    job.refresh_from_db()
    snap.refresh_from_db()
    assert job.status == JobStatus.PENDING and snap.status == SnapshotStatus.CREATING
    assert job.events.get(kind=EventKind.RETRIED).actor == operator
    screenshots(page, "exports-snapshot-retried")


def test_the_jobs_table_follows_a_snapshot_being_made(site: Site, page):
    snap = services.create_snapshot(mapping(of=tenant("Acme")))
    first, *_ = claim_jobs("w1", 3)
    log_in(page, site)
    page.goto(f"{site.url}/admin/exports/snapshot/{snap.pk}/change/")
    assert page.locator(f"#job-{first.pk}").get_attribute("data-status") == "claimed"

    report(first, JobStatus.COMPLETED, row_count=42, size_bytes=2048)
    # No reload: the page asks again while the snapshot is being made.
    page.wait_for_selector(f'#job-{first.pk}[data-status="completed"]', timeout=15_000)
    assert page.locator("#snapshot-jobs").get_attribute("data-open") == "true"
