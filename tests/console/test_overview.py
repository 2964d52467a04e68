"""The console's front page: the figures that need a person, each linking to the list
that explains it (and that list showing exactly what was counted), scoped to the user's
tenant, in a bounded number of queries."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from ingest.runs.models import BreakerState, RunnerBreaker
from jobs import engine
from jobs.models import Job
from tests.support.base import make_job, staff, tenant
from tests.support.jobs.builders import failed, failing, grant, operator, rows, running, undelivered

pytestmark = pytest.mark.django_db

INDEX = "admin:index"


def breaker(target: str, state: str, of=None) -> RunnerBreaker:
    now = timezone.now()
    opened = {} if state == BreakerState.CLOSED else {"opened_at": now, "next_probe_at": now}
    return RunnerBreaker.objects.create(target=target, tenant=of or tenant("Acme"), state=state, **opened)


def figure(page: str, key: str) -> tuple[str, str]:
    """The (value, link) of the figure ``key`` on the front page."""
    match = re.search(rf'data-figure="{key}"[^>]*><a href="([^"]+)"><span class="figure">([^<]+)<', page)
    assert match, f"no figure {key}"
    return match.group(2), match.group(1).replace("&amp;", "&")


def test_the_front_page_counts_failed_rescued_and_stuck_jobs_and_links_their_lists(admin_client, clock):
    failed(error="ValueError: 1")
    clock.advance(2 * 3600)
    lost = running()
    clock.advance(3600)  # past its lease: stuck until the reaper comes
    stuck = running()
    clock.advance(3600)
    engine.rescue(Job.objects.get(pk=stuck.pk))
    lost.refresh_from_db()

    page = admin_client.get(reverse(INDEX)).content.decode()

    checks = {"failed": ("0", []), "rescued": ("1", [stuck.pk]), "stuck": ("1", [lost.pk])}
    for key, (value, expected) in checks.items():
        shown, url = figure(page, key)
        assert shown == value, key
        assert sorted(rows(admin_client.get(url))) == sorted(expected), key


def test_failures_of_the_last_hour_are_counted_and_listed(admin_client, clock):
    failed(error="ValueError: 1")
    clock.advance(2 * 3600)
    recent = [failed(error="ValueError: 2"), failed(error="KeyError: 'x'")]

    page = admin_client.get(reverse(INDEX)).content.decode()

    shown, url = figure(page, "failed")
    assert shown == "2"
    assert sorted(rows(admin_client.get(url))) == sorted(job.pk for job in recent)


def test_the_biggest_failure_groups_are_on_the_front_page_with_retry(admin_client, clock):
    for n in range(3):
        failed(error=f"ConnectionError: host 10.0.0.{n} refused")
    page = admin_client.get(reverse(INDEX)).content.decode()
    assert "ConnectionError: host &lt;n&gt;.&lt;n&gt;.&lt;n&gt;.&lt;n&gt; refused" in page
    assert "Retry 3 jobs<" in page
    assert reverse("admin:jobs_job_triage") in page


def test_the_oldest_due_job_of_each_queue_and_the_busiest_pipelines_are_shown(admin_client, clock):
    first = make_job()
    clock.advance(600)
    make_job()
    busy = running()
    page = admin_client.get(reverse(INDEX)).content.decode()

    queues = page[page.index('id="overview-queues"') : page.index('id="overview-pipelines"')]
    assert f"#{first.pk}" in queues and "10 min" in queues
    pipelines = page[page.index('id="overview-pipelines"') :]
    assert reverse("admin:jobs_job_pipeline", args=[busy.pipeline_id]) in pipelines


def test_maintenance_jobs_are_not_among_the_busiest_pipelines(admin_client, clock):
    """The loops that keep the platform in order (the exports' reconciliation runs most of
    every minute) and retention are not a pipeline's work: they never fill the list."""
    maintenance = ("exports.Reconcile", "ingest.ReconcileRuns", "jobs.prune", "factors.prune_loads")
    for name in maintenance:
        running(name)
    busy = running("factors.csv_ingest")

    page = admin_client.get(reverse(INDEX)).content.decode()

    pipelines = page[page.index('id="overview-pipelines"') :]
    pipelines = pipelines[: pipelines.index("</section>")]
    assert reverse("admin:jobs_job_pipeline", args=[busy.pipeline_id]) in pipelines
    assert pipelines.count("/pipeline/") == 1
    assert not [name for name in maintenance if name in pipelines]


def test_a_tenants_staff_see_only_their_tenants_figures(client, clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    failed(error="ValueError: mine", tenant=acme)
    failed(error="ValueError: theirs", tenant=globex)
    failed(error="ValueError: theirs", tenant=globex)
    breaker("cluster-a/hooks", BreakerState.OPEN, of=acme)
    breaker("cluster-a/hooks", BreakerState.OPEN, of=globex)
    breaker("cluster-b/hooks", BreakerState.OPEN, of=globex)
    alice = grant(staff("alice", of=acme), "view_job")
    alice.user_permissions.add(Permission.objects.get(codename="view_runnerbreaker"))
    client.force_login(alice)

    page = client.get(reverse(INDEX)).content.decode()

    assert figure(page, "failed")[0] == "1"
    assert "mine" in page and "theirs" not in page
    shown, url = figure(page, "breakers-open")  # a tenant's breakers are its own
    assert shown == "1"
    listed = client.get(url).context["cl"].result_list
    assert [(b.target, b.tenant) for b in listed] == [("cluster-a/hooks", acme)]


def test_every_tenants_open_breakers_are_counted_for_platform_operators(client, clock):
    breaker("cluster-a/hooks", BreakerState.OPEN)
    breaker("cluster-b/hooks", BreakerState.HALF_OPEN, of=tenant("Globex"))
    breaker("cluster-c/hooks", BreakerState.CLOSED)
    user = operator()
    user.user_permissions.add(Permission.objects.get(codename="view_runnerbreaker"))
    client.force_login(user)

    page = client.get(reverse(INDEX)).content.decode()

    shown, url = figure(page, "breakers-open")
    assert shown == "2"
    listed = client.get(url)
    assert listed.status_code == 200
    assert {b.target for b in listed.context["cl"].result_list} == {"cluster-a/hooks", "cluster-b/hooks"}


def test_a_user_who_may_not_see_jobs_gets_no_engine_figures(client):
    client.force_login(staff("nobody", operator=True))
    page = client.get(reverse(INDEX)).content.decode()
    assert 'id="overview-engine"' not in page


def test_the_front_page_reads_a_bounded_number_of_queries(admin_client, clock):
    for n in range(20):
        failed(error=f"ValueError: {n}")
        make_job()
    running()
    admin_client.get(reverse(INDEX))  # sessions, content types: warmed

    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(reverse(INDEX)).status_code == 200

    assert len(queries) <= 30
    assert not any(
        re.search(r'SELECT COUNT\(\*\) AS "__count" FROM "jobs_job"\s*$', q["sql"]) for q in queries
    ), "a whole-table count"


def test_the_outbox_backlog_and_failures_are_on_the_front_page(admin_client, clock):
    failing()  # (runs the worker until idle: first)
    undelivered()
    page = admin_client.get(reverse(INDEX)).content.decode()

    # Each publish makes two deliveries (two subscribers); the failing one is retrying.
    waiting, url = figure(page, "outbox-undelivered")
    assert waiting == "3"
    assert len(admin_client.get(url).context["cl"].result_list) == 3
    assert figure(page, "outbox-failing")[0] == "1"
    assert figure(page, "outbox-quarantined")[0] == "0"


def test_the_queue_figure_lists_only_the_jobs_due_now(admin_client, clock):
    due = make_job()
    later = make_job(run_after=clock.now() + timedelta(hours=1))  # the engine's clock decides "due"
    page = admin_client.get(reverse(INDEX)).content.decode()
    link = re.search(r'data-queue="default"><td><a href="([^"]+)"', page).group(1).replace("&amp;", "&")
    listed = rows(admin_client.get(link))
    assert due.pk in listed and later.pk not in listed


def test_the_size_of_the_whole_jobs_table_is_for_platform_operators_only(client, admin_client):
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    make_job()
    acme = tenant("Acme")
    client.force_login(grant(staff("alice", of=acme), "view_job"))
    assert 'data-figure="jobs"' not in client.get(reverse(INDEX)).content.decode()
    assert 'data-figure="jobs"' in admin_client.get(reverse(INDEX)).content.decode()


@pytest.mark.parametrize(
    "url",
    [
        "/admin/jobs/job/?type=%00",
        "/admin/jobs/job/?q=a%00b",
        "/admin/jobs/job/triage/%00/retry/",
        "/admin/jobs/delivery/?subscriber=%00",
    ],
)
def test_a_nul_character_in_an_address_is_a_400_not_a_500(admin_client, url):
    response = admin_client.get(url)
    assert response.status_code == 400
    assert "NUL" in response.content.decode()


def test_each_app_registers_its_figures_from_its_overview_module():
    """Discovered at start-up, in the order the apps are installed."""
    from console import figures
    from exports import overview as exports_overview
    from ingest import overview as ingest_overview
    from market import overview as market_overview

    assert figures.providers() == [ingest_overview.figures, market_overview.figures, exports_overview.figures]


def test_a_provider_an_app_registers_shows_its_figures_on_the_front_page(admin_client):
    from console import figures
    from console.admin import front_page_figures
    from console.overview import Figure

    @front_page_figures
    def reports(request):
        return [Figure("reports-late", "reports late", 3, reverse("admin:jobs_job_changelist"), tone="warn")]

    try:
        page = admin_client.get(reverse(INDEX)).content.decode()
    finally:
        figures._providers.remove(reports)

    assert figure(page, "reports-late") == ("3", reverse("admin:jobs_job_changelist"))
