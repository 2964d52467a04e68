"""The operator's view in a real browser: an uploaded CSV followed live to success on its
pipeline page, a failing job seen turning red and retried from the page, and screenshots
of the pipeline page and the dashboard."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from factors.models import CarbonReport
from jobs import engine
from jobs.models import Job
from tests.browser.conftest import WATCH_BOXES, Site, log_in, needs_chromium, screenshot, screenshots
from tests.support.base import make_job
from tests.support.factors import builders

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

ROWS = 20_000
HEADER = ["quantity", "unit", "haul", "cabin"]
PIPELINE_PAGE = re.compile(r"/admin/jobs/job/pipeline/[0-9a-f-]{36}/$")


def finished(page: Any, timeout: float = 40_000) -> str:
    page.wait_for_function(
        "() => document.getElementById('pipeline').dataset.finished === '1'", timeout=timeout
    )
    return page.text_content("#pipeline-state")


def upload_entries(page: Any, site: Site, report: CarbonReport, body: bytes) -> None:
    page.goto(f"{site.url}/admin/factors/dataentry/upload/")
    page.select_option("#id_report", str(report.pk))
    page.select_option("#id_module_type", "travel")
    page.select_option("#id_data_entry_type", "plane")
    page.set_input_files("#id_file", files=[{"name": "plane.csv", "mimeType": "text/csv", "buffer": body}])
    page.click(".submit-row input[type=submit]")


def test_an_uploaded_csv_is_followed_live_to_success_and_the_report_stats_change(site, page):
    report = builders.report("LAB1", 2024)
    builders.plane_factors(2024)
    log_in(page, site)
    report_page = page.context.new_page()
    report_page.goto(f"{site.url}/admin/factors/carbonreport/{report.pk}/change/")
    assert "0 entries" in report_page.text_content(".field-stats_table")

    upload_entries(page, site, report, builders.csv_bytes(HEADER, builders.plane_rows(ROWS)))

    page.wait_for_url(PIPELINE_PAGE)
    page.evaluate(WATCH_BOXES)
    page.wait_for_selector("#pipeline-live:text-is('live')")
    busy = f"() => document.querySelector('.recalc-badge[data-module=\"{builders.module(report).pk}\"]')"
    report_page.reload()  # enqueueing writes no event: the queued ingest shows on a reload
    assert report_page.evaluate(f"({busy})().dataset.busy") == "1"
    report_page.evaluate("window.__notReloaded = true")
    site.start_worker()

    assert finished(page) == "succeeded"
    seen = page.evaluate("[...window.__seen]")
    # Progress was shown on the way: some job's bar stood between empty and full.
    assert any(
        state == "running" and value and 0 < int(value) < 100
        for state, _, value in (s.partition(":") for s in seen)
    ), seen
    assert page.evaluate("window.__notReloaded") is True
    types = page.locator(".pl-job .pl-type").all_text_contents()
    assert types[0] == "factors.csv_ingest" and "factors.aggregation" in types
    # Recalculated while loading: the chunks, under the closing recalculation that waited.
    assert page.locator(".pl-fan-in .pl-job").count() >= 1
    assert page.locator(".pl-job.pl-succeeded").count() == len(types)
    screenshots(page, "pipeline-succeeded")

    # The report page's badge and figures followed without a reload...
    report_page.wait_for_function(f"() => ({busy})().dataset.busy === '0'")
    assert report_page.evaluate("window.__notReloaded") is True
    report_page.locator("td.field-entries", has_text="20000").wait_for()
    # ... and its stats say so after one.
    report_page.reload()
    assert f"{ROWS:,} entries" in report_page.text_content(".field-stats_table")

    # At both widths, with jobs in every state: tests/browser/test_page_widths.py.
    page.goto(f"{site.url}/admin/jobs/job/dashboard/")
    screenshot(page, "dashboard")
    page.goto(f"{site.url}/admin/jobs/job/")
    screenshot(page, "job-list")


def test_a_failing_job_turns_red_live_and_succeeds_when_retried_from_the_page(site, page, tmp_path: Path):
    flag = tmp_path / "flag"
    job = make_job("tests.fail_unless_file", {"flag": str(flag)})
    log_in(page, site)
    page.goto(f"{site.url}/admin/jobs/job/pipeline/{job.pipeline_id}/")
    page.evaluate(WATCH_BOXES)
    page.wait_for_selector("#pipeline-live:text-is('live')")
    box = page.locator(f"#job-{job.pk}")
    assert box.get_attribute("data-state") == "pending"
    retry = box.locator("button[data-op=retry]")
    assert retry.is_hidden()

    site.start_worker()

    page.wait_for_selector(f"#job-{job.pk}.pl-failed")
    assert box.locator(".pl-state").text_content() == "failed"
    assert "flag file" in box.locator(".pl-error").text_content()
    assert finished(page) == "failed"
    screenshots(page, "pipeline-failed")

    flag.touch()
    retry.click()

    page.wait_for_selector(f"#job-{job.pk}.pl-succeeded")
    assert finished(page) == "succeeded"
    assert box.locator(".pl-error").is_hidden()
    assert retry.is_hidden()
    assert page.evaluate("window.__notReloaded") is True
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert job.events.filter(kind="retried", actor__username="root").exists()


def test_a_folded_groups_line_follows_its_jobs_live(site: Site, page):
    parent = make_job("tests.noop")
    children = [
        make_job("tests.noop", {"n": n}, parent=parent, pipeline=parent.pipeline_id) for n in range(14)
    ]
    log_in(page, site)
    page.goto(f"{site.url}/admin/jobs/job/pipeline/{parent.pipeline_id}/")
    page.wait_for_selector("#pipeline-live:text-is('live')")
    summary = page.locator(".pl-folded > details > summary")
    assert " ".join(summary.inner_text().split()) == "6 more: 6 pending"

    engine.cancel(Job.objects.get(pk=children[-1].pk), reason="not needed")

    page.wait_for_function(
        "() => document.querySelector('.pl-folded > details > summary').textContent.includes('1 cancelled')"
    )
    assert " ".join(summary.inner_text().split()) == "6 more: 5 pending, 1 cancelled"
    summary.click()
    screenshots(page, "pipeline-folded-siblings")
