"""From a failed job to what it works for, in a real browser, counting clicks from the
front page: the operator reaches the cause (the domain's own words on the job's page)
and starts the domain's fix in at most four."""

from __future__ import annotations

import pytest

import jobs
from ingest.runs import services
from ingest.runs.models import RunStatus
from jobs.models import Job
from tests.browser.conftest import WIDTHS, Site, log_in, needs_chromium, screenshot
from tests.browser.test_operator_scenario import MAX_CLICKS, Clicks
from tests.support.base import tenant
from tests.support.ingest import builders

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

WIDER_THAN_SCREEN = """() => Math.max(...[...document.querySelectorAll('#job-subject, #job-subject *')]
  .map((el) => el.getBoundingClientRect().right)) - window.innerWidth"""


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
    for name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, f"console-job-subject-{name}")
        # The subject's block fits the screen (the job's own fieldsets are Django's).
        overflow = page.evaluate(WIDER_THAN_SCREEN)
        assert overflow <= 0, f"the subject is wider than the screen at {width} px"
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})

    click("#job-subject button:has-text('Retry the failed hooks')")

    page.wait_for_selector(".messagelist .success")
    assert f"Run {run.pk}: the hooks of 1 batch(es) run again." in page.inner_text(".messagelist")
    assert click.count == 3 <= MAX_CLICKS
