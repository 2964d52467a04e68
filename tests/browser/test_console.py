"""The console's first impressions in a real browser: the site root leads to the admin,
which is named Conveyor, and the job list fits a 1,440 px screen with its error column."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Route, WebSocketRoute, expect

from jobs import engine
from jobs.models import Worker
from tests.browser.conftest import ARTIFACTS, WIDTHS, Site, log_in, needs_chromium, screenshot, screenshots
from tests.support.base import claim_one, make_job, tenant

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]


def test_the_site_root_leads_a_person_to_the_admin(site: Site, page):
    page.goto(f"{site.url}/")
    assert page.url == f"{site.url}/admin/login/?next=/admin/"
    assert page.title() == "Log in | Conveyor"
    page.goto(f"{site.url}/nothing-here")
    assert "URLconf" not in page.content() and "admin/" not in page.inner_text("body")


def test_the_job_list_fits_1440_pixels_with_the_last_error(site: Site, page):
    acme = tenant("Acme Manufacturing International")
    for n in range(3):
        make_job("tests.noop", {"n": n}, tenant=acme)
        job, _ = claim_one("w1")
        engine.fail(
            job,
            job.lease_token,
            "ValueError: row 12,345 of plane_entries.csv has a "
            "unit nobody has heard of (furlongs per fortnight)",
            permanent=True,
            worker="w1",
        )
    log_in(page, site)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{site.url}/admin/jobs/job/")
    assert page.locator("th.column-error_display").count() == 1
    # Neither the page nor the list's own box scrolls sideways: no column is cut off.
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    hidden = page.evaluate(
        "(() => { const box = document.querySelector('#changelist .results');"
        " return box.scrollWidth - box.clientWidth; })()"
    )
    screenshot(page, "console-job-list-1440")
    assert overflow <= 0 and hidden <= 0, (overflow, hidden)
    assert page.locator("th.column-duration").is_visible()
    first_error = page.locator("td.field-error_display span").first
    assert first_error.get_attribute("title").startswith("ValueError: row 12,345")


@pytest.mark.parametrize("width", ["phone", "desktop"])
def test_the_job_page_and_its_history_fit_the_screen(site: Site, page, width):
    """At 390 px the page is no wider than the screen (the history's rows are cards
    there); at 1,440 px the history is a table, whole in its box."""
    make_job("tests.noop", {"rows": list(range(40))})
    job, _ = claim_one("w-7f3a9c2e5b1d0a4c-worker-on-a-long-host-name")
    engine.record_progress(job.pk, job.lease_token, 1_500, 3_000, "batch 3 of 6", worker="w1")
    engine.fail(
        job,
        job.lease_token,
        "ValueError: row 12,345 of plane_entries.csv has a unit nobody has heard of "
        "(furlongs_per_fortnight_in_the_reference_frame_of_the_sender)",
        permanent=True,
        worker="w1",
    )
    user = log_in(page, site)
    engine.retry(job, actor=user, reason="the unit table was fixed, see ticket OPS-4711", via="admin")
    page.set_viewport_size({"width": WIDTHS[width], "height": 900})
    page.goto(f"{site.url}/admin/jobs/job/{job.pk}/change/")

    history = page.locator(".history-table tr.history-row")
    assert history.count() == 3  # claimed, failed, retried: the progress step is folded
    assert "1 progress step folded" in page.inner_text(".history-group")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    screenshot(page, f"console-job-history-{width}")
    page.locator(".history-group").screenshot(path=str(ARTIFACTS / f"console-job-history-table-{width}.png"))
    assert overflow <= 0, f"the page is {overflow} px wider than the screen"
    retried = page.locator(".history-row[data-kind=retried]")
    assert retried.locator("td.field-message_shown").is_visible()
    assert retried.locator("td.field-by").inner_text() == "root"
    # A phone shows cards, each cell named: no header row; nor a cell with nothing to say.
    assert page.locator(".history-table thead").is_visible() is (width == "desktop")
    assert retried.locator("td.field-worker").is_visible() is (width == "desktop")
    box = page.evaluate(
        "(() => { const box = document.querySelector('.history-scroll');"
        " return box.scrollWidth - box.clientWidth; })()"
    )
    assert box <= 0, f"the history is {box} px wider than its box"


def test_the_job_page_follows_the_job_to_its_end(site: Site, page):
    make_job("tests.noop")
    job, _ = claim_one("w1")
    log_in(page, site)
    page.goto(f"{site.url}/admin/jobs/job/{job.pk}/change/")
    assert page.locator("#job-live").get_attribute("data-state") == "running"
    assert page.locator("button", has_text="Recover").count() == 1

    engine.record_progress(job.pk, job.lease_token, 1_500, 3_000, "batch 3 of 6", worker="w1")
    # Drawn by the live event, or by the server after the page reloads itself when the
    # event came before its socket opened: the same text either way.
    expect(page.locator(".field-progress_display .readonly")).to_have_text("1,500/3,000 (50%)")
    engine.complete(job, job.lease_token, worker="w1")
    # No reload by hand: the page sees the success and draws itself again.
    page.wait_for_selector('#job-live[data-state="succeeded"]', state="attached")
    assert page.locator("button", has_text="Recover").count() == 0
    assert page.locator("button", has_text="Cancel").count() == 0
    assert "finished successfully" in page.inner_text(".job-why")
    screenshots(page, "console-job-followed-to-success")


def test_progress_made_before_the_page_subscribed_is_shown_when_it_does(site: Site, page):
    make_job("tests.noop")
    job, _ = claim_one("w1")
    log_in(page, site)
    # The live script is held back until the progress is stored: the page, drawn before
    # it, must notice the event it missed when its socket opens.
    held: list[Route] = []
    page.route("**/live.js", lambda route: held.append(route))
    page.goto(f"{site.url}/admin/jobs/job/{job.pk}/change/", wait_until="commit")
    page.wait_for_selector("#job-live", state="attached")
    assert page.inner_text(".field-progress_display .readonly") == "—"
    engine.record_progress(job.pk, job.lease_token, 1_500, 3_000, "batch 3 of 6", worker="w1")
    for _ in range(250):  # the held request reaches the test as the page is served
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the page never asked for its live script"
    for route in held:
        route.continue_()
    expect(page.locator(".field-progress_display .readonly")).to_have_text("1,500/3,000 (50%)")


def test_an_event_that_passes_while_the_page_subscribes_is_not_missed(site: Site, page):
    """The page's own subscription is held on its way to the server while a progress step
    is published: the page must look for what it missed only once subscribed."""
    make_job("tests.noop")
    job, _ = claim_one("w1")
    log_in(page, site)
    held: list[tuple[WebSocketRoute, str | bytes]] = []
    sockets: list[WebSocketRoute] = []

    def route(socket: WebSocketRoute) -> None:
        server = socket.connect_to_server()
        sockets.append(socket)
        if len(sockets) == 1:  # the page's own socket: its messages wait
            socket.on_message(lambda message: held.append((server, message)))

    page.route_web_socket("**/ws/jobs/", route)
    page.goto(f"{site.url}/admin/jobs/job/{job.pk}/change/")
    for _ in range(250):  # the page sends its subscription once its socket is open
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the page never subscribed"
    # A second socket, subscribed before the step: once it has the event, the server has
    # passed it out to its subscribers, the held page not among them.
    page.evaluate(
        """jobId => new Promise(subscribed => {
            const probe = new WebSocket(`ws://${location.host}/ws/jobs/`);
            window.probeHasProgress = new Promise(progress => {
                probe.onopen = () => probe.send(JSON.stringify({subscribe: {job: jobId}}));
                probe.onmessage = m => {
                    const data = JSON.parse(m.data);
                    if (data.subscribed) subscribed();
                    if (data.event && data.event.kind === "progress") progress();
                };
            });
        })""",
        job.pk,
    )
    engine.record_progress(job.pk, job.lease_token, 1_500, 3_000, "batch 3 of 6", worker="w1")
    page.evaluate("() => window.probeHasProgress")
    assert page.inner_text(".field-progress_display .readonly") == "—"
    for server, message in held:
        server.send(message)
    expect(page.locator(".field-progress_display .readonly")).to_have_text("1,500/3,000 (50%)")


def test_an_operators_action_is_answered_even_when_its_own_event_arrives_first(site: Site, page):
    """The Recover form's answer is held back until the page has surely had the job's
    ``recovered`` event over its socket: the page must not reload over the answer (which
    carries the success message), as it does for anyone else's action."""
    from jobs.models import Job

    make_job("tests.noop")
    job, _ = claim_one("gone-worker")
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(hours=1))
    log_in(page, site)
    page.goto(f"{site.url}/admin/jobs/job/{job.pk}/change/")
    page.wait_for_function("() => window.ConveyorJobs !== undefined")
    page.wait_for_timeout(500)  # subscribed: the socket answers within a few milliseconds
    answered: list[Route] = []

    def hold_the_answer(route: Route) -> None:
        if route.request.method != "POST":
            route.continue_()
            return
        response = route.fetch(max_redirects=0)  # the server recovers the job and publishes
        page.wait_for_timeout(1_500)  # the event reaches the page long before the answer
        answered.append(route)
        route.fulfill(response=response)

    page.route(f"**/admin/jobs/job/{job.pk}/**", hold_the_answer)
    page.click("button:text-is('Recover')")
    expect(page.locator(".messagelist .success")).to_contain_text("recovered", timeout=15_000)
    assert answered, "the page reloaded itself over the form's answer"


def test_recovering_a_job_from_a_live_worker_asks_first(site: Site, page):
    make_job("tests.noop")
    job, _ = claim_one("w1")
    Worker.objects.create(
        name="w1",
        hostname="h",
        pid=1,
        started_at=timezone.now(),
        last_seen_at=timezone.now() + timedelta(minutes=5),
    )  # alive throughout
    log_in(page, site)
    page.goto(f"{site.url}/admin/jobs/job/{job.pk}/change/")
    assert "worker w1 is alive" in page.inner_text(".job-lease")
    page.fill("input[name=reason]", "stuck on a lock")
    page.click("button:text-is('Recover')")
    assert "worker w1 is alive" in page.inner_text("#operation-warning")
    job.refresh_from_db()
    assert job.state == "running"  # the first click only asked
    page.click("input[type=submit][value^='Yes, recover']")
    page.wait_for_selector(".messagelist .success")
    job.refresh_from_db()
    assert job.state == "pending"
    assert job.events.get(kind="recovered").message == "stuck on a lock"


def test_the_pipeline_page_asks_before_recovering_from_a_live_worker(site: Site, page):
    make_job("tests.noop")
    job, _ = claim_one("w1")
    Worker.objects.create(
        name="w1",
        hostname="h",
        pid=1,
        started_at=timezone.now(),
        last_seen_at=timezone.now() + timedelta(minutes=5),
    )
    log_in(page, site)
    page.goto(f"{site.url}/admin/jobs/job/pipeline/{job.pipeline_id}/")
    asked: list[str] = []

    def answer(dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss() if len(asked) == 1 else dialog.accept()

    page.on("dialog", answer)
    recover = page.locator(f"#job-{job.pk} button[data-op=recover]")
    recover.click()  # dismissed: nothing happens
    page.wait_for_function("() => !document.querySelector('button[data-op=recover]').disabled")
    job.refresh_from_db()
    assert "worker w1 is alive" in asked[0] and job.state == "running"
    recover.click()  # accepted: posted again with confirm=yes
    page.wait_for_selector("#pipeline-messages .success")
    job.refresh_from_db()
    assert len(asked) == 2 and job.state == "pending"
