"""Chromium's word on the Content-Security-Policy: a staff user goes through the admin
pages and the live pages (job list, job detail, pipeline page, dashboard, API docs) and
nothing is refused, while the live parts (WebSocket, event stream, scripts setting
styles) still work. The ``page`` fixture fails any browser test that sees a violation."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.events import publish
from tests.browser.conftest import CspViolations, Site, log_in, needs_chromium
from tests.support.base import make_job
from tests.support.factors import builders

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

SUCCEEDED_GREEN = "rgb(47, 133, 90)"


def settle(page: Any) -> None:
    """Let the page's deferred scripts run and their reports reach this process (a
    violation report is an event the test cannot wait for: it may never come)."""
    page.wait_for_timeout(500)


def visit(page: Any, site: Site, path: str, violations: CspViolations, ready: str = "body") -> Any:
    response = page.goto(f"{site.url}{path}")
    assert response.ok, (path, response.status)
    assert "default-src 'self'" in response.headers["content-security-policy"], path
    page.wait_for_selector(ready)
    settle(page)
    assert violations == [], (path, violations)
    return response


def test_the_collector_sees_what_the_policy_refuses(site, page, csp_violations):
    visit(page, site, "/admin/login/", csp_violations)

    page.evaluate("""() => {
        const script = document.createElement('script');
        script.textContent = 'window.injected = true';
        document.body.append(script);
    }""")
    settle(page)

    assert page.evaluate("window.injected === undefined")
    assert any("script-src" in line for line in csp_violations), csp_violations
    csp_violations.clear()  # seen; the fixture would fail the test on it


def test_staff_pages_and_live_pages_run_without_a_violation(site, page, csp_violations):
    job = make_job("tests.noop")
    event = publish("tests.Happened", {"n": 1})
    report = builders.report("LAB1", 2024)
    visit(page, site, "/admin/login/", csp_violations)
    log_in(page, site)

    for path in [
        "/admin/",
        f"/admin/jobs/job/{job.pk}/change/",
        "/admin/jobs/event/",
        f"/admin/jobs/event/{event.pk}/change/",
        "/admin/factors/dataentry/upload/",
        f"/admin/factors/carbonreport/{report.pk}/change/",
        "/admin/axes/accessattempt/",
        "/admin/auth/user/",
    ]:
        visit(page, site, path, csp_violations)

    # The job list follows its jobs over the WebSocket: the badge turns green live.
    visit(page, site, "/admin/jobs/job/", csp_violations)
    badge = page.locator(f"#result_list tr:has(a[href$='/{job.pk}/change/']) .job-state")
    assert badge.text_content() == "pending"
    site.start_worker()
    page.wait_for_selector(".job-state-succeeded")
    assert badge.evaluate("el => getComputedStyle(el).backgroundColor") == SUCCEEDED_GREEN
    settle(page)
    assert csp_violations == []

    # The pipeline page: its event stream opens and its script sizes the bars.
    visit(
        page,
        site,
        f"/admin/jobs/job/pipeline/{job.pipeline_id}/",
        csp_violations,
        ready=f"#job-{job.pk}.pl-succeeded",
    )
    bar = page.locator(f"#job-{job.pk} .pl-bar")
    assert bar.evaluate("el => el.style.width") == "100%"

    visit(page, site, "/admin/jobs/job/dashboard/", csp_violations, ready="#dashboard-figures")
    assert page.locator(".chart-panel svg").count() >= 1

    # Swagger UI, from its own files and its start-up script at ?script, reads the schema.
    visit(page, site, "/api/docs/", csp_violations, ready=".swagger-ui .opblock")
    assert page.locator(".swagger-ui .opblock").count() > 10


def test_the_admin_lockout_page_runs_without_a_violation(site, page, csp_violations):
    visit(page, site, "/admin/login/", csp_violations)
    for _ in range(5):
        page.fill("#id_username", "nobody")
        page.fill("#id_password", "wrong")
        page.click("input[type=submit]")
        page.wait_for_load_state()

    assert page.locator("#login-locked").is_visible()
    settle(page)
    assert csp_violations == []
