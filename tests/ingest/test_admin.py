"""The ingest admin: sources with their hooks, the run page's timeline and its actions,
and the breakers, each scoped to the staff user's tenant."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

import jobs
from ingest.runs import breaker, services
from ingest.runs.errors import TransientResourceError
from ingest.runs.models import ActionKind, BreakerState, IngestRun, IngestSource, RunnerBreaker, RunStatus
from ingest.runs.runners.local import LocalRunner
from tests.base import page, staff
from tests.ingest import builders
from tests.ingest.running import drain

pytestmark = pytest.mark.django_db

SOURCES = "/admin/ingest/ingestsource/"
RUNS = "/admin/ingest/ingestrun/"
BREAKERS = "/admin/ingest/runnerbreaker/"


def staff_browser(username: str, of) -> Client:
    """Staff of a tenant, granted the ingest pages and the job pages."""
    user = staff(username, of=of)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["ingest", "jobs"]))
    browser = Client()
    browser.force_login(user)
    return browser


@pytest.fixture
def alice(acme) -> Client:
    return staff_browser("alice", acme)


def source_form(**fields):
    """The add form's POST data: the source's fields and its hooks' inline."""
    data = {"name": "orders", "kind": "test_counting", "config": '{"batches": 2}',
            "batch_size": "100", "max_failures": "3", "enabled": "on",
            "hooks-TOTAL_FORMS": "1", "hooks-INITIAL_FORMS": "0", "hooks-MIN_NUM_FORMS": "0",
            "hooks-MAX_NUM_FORMS": "1000", "hooks-0-name": "check", "hooks-0-position": "0",
            "hooks-0-image": "registry.example/check:1", "hooks-0-command": '["true"]',
            "hooks-0-env": "{}", "hooks-0-timeout_seconds": "600"}
    data.update(fields)
    return data


# --- pages ------------------------------------------------------------------------------------


def test_every_ingest_page_answers_with_rows_in_it(admin_client, acme, clock):
    run = services.start_ingest(builders.source(acme, batches=2))
    drain(clock)
    breaker.record_failure("kube:conveyor-hooks", 1, "429 Too Many Requests", clock.now())
    for url in [SOURCES, f"{SOURCES}add/", f"{SOURCES}{run.source_id}/change/", RUNS,
                f"{RUNS}{run.pk}/change/", f"{RUNS}{run.pk}/timeline/", BREAKERS,
                f"{BREAKERS}{RunnerBreaker.objects.get(target='kube:conveyor-hooks').pk}/change/",
                f"{RUNS}?status=succeeded", f"{RUNS}?source__id__exact={run.source_id}"]:
        page(admin_client, url)


def test_the_run_list_shows_status_batches_records_failures_and_who(admin_client, admin_user, acme,
                                                                     clock):
    run = services.start_ingest(builders.source(acme, batches=2, size=3), actor=admin_user,
                                via="admin")
    drain(clock)

    listing = page(admin_client, RUNS)

    assert 'class="ingest-status ingest-status-succeeded"' in listing
    assert "2 / 2" in listing and "0 of 3 allowed" in listing
    assert '<td class="field-records_published">6</td>' in listing
    assert f'<td class="field-started_by nowrap">{admin_user.username}</td>' in listing
    assert f"/admin/ingest/ingestrun/{run.pk}/change/" in listing


def test_the_run_page_shows_each_batch_and_each_hook_failure_escaped(admin_client, acme, clock):
    source = builders.source(acme, batches=2, hooks=[builders.PASS, builders.exit_with(
        3, "<script>alert('row 7')</script>")], max_failures=2)
    run = services.start_ingest(source)
    drain(clock)

    html = page(admin_client, f"{RUNS}{run.pk}/change/")

    assert html.count('class="ingest-batch ingest-batch-hooks_failed"') == 2
    assert html.count('data-hook="hook1" data-status="failed"') == 2
    assert html.count('data-hook="hook0" data-status="succeeded"') == 2
    assert "&lt;script&gt;alert(&#x27;row 7&#x27;)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert re.search(r"<td>3</td>", html)  # the exit code
    assert "conveyor-hook-" in html  # the runner's job name
    assert "reached the run&#x27;s limit of 2" in html
    assert f'data-events-url="/sync/pipelines/{run.pipeline}/events"' in html
    assert f"/admin/jobs/job/pipeline/{run.pipeline}/" in html
    assert 'src="/static/ingest/run_live.js"' in html
    # The action log: who did what, and through what.
    assert re.search(r"<td>started</td>\s*<td>—</td>\s*<td>api</td>", html)
    assert re.search(r"<td>failed</td>\s*<td>—</td>\s*<td>pipeline</td>", html)
    # A failed run offers the retry of its hooks; it cannot be cancelled any more.
    assert "Retry the failed hooks" in html and "Cancel the run" not in html


def test_the_run_page_counts_down_to_a_hook_deliverys_next_attempt(admin_client, acme, clock,
                                                                   monkeypatch):
    def busy(self, spec):
        raise TransientResourceError("0/3 nodes are available")

    monkeypatch.setattr(LocalRunner, "launch", busy)
    run = services.start_ingest(builders.source(acme, batches=1))
    jobs.run_until_idle()

    html = page(admin_client, f"{RUNS}{run.pk}/timeline/")

    assert "attempt 1 of 6, next attempt" in html
    assert re.search(r'<time class="ingest-countdown" datetime="[^"]+" title="[^"]+">in 1 min 00 s</time>',
                     html)
    assert "try 1: 0/3 nodes are available" in html


# --- actions on runs --------------------------------------------------------------------------


def test_the_run_page_cancels_through_the_service_as_the_staff_user(admin_client, admin_user, acme):
    run = services.start_ingest(builders.source(acme))

    response = admin_client.post(f"{RUNS}{run.pk}/cancel/", follow=True)

    assert f"Run {run.pk} cancelled." in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    action = run.actions.get(kind=ActionKind.CANCELLED)
    assert (action.actor, action.via) == (admin_user, "admin")
    again = admin_client.post(f"{RUNS}{run.pk}/cancel/", follow=True).content.decode()
    assert f"Run {run.pk}: not done. Run {run.pk} is already cancelled." in again


def test_retry_hooks_and_retry_from_batch_from_the_run_page(admin_client, admin_user, acme, clock):
    hooked = builders.source(acme, "hooked", batches=1, hooks=[builders.exit_with(1)], max_failures=1)
    fetched = builders.source(acme, "fetched", config={"batches": 2, "size": 1, "fail_at": 2})
    failed_hooks, failed_fetch = services.start_ingest(hooked), services.start_ingest(fetched)
    drain(clock)
    builders.run_instead(hooked, builders.PASS)
    fetched.config = {"batches": 2, "size": 1}
    fetched.save()

    first = admin_client.post(f"{RUNS}{failed_hooks.pk}/retry-hooks/", follow=True).content.decode()
    second = admin_client.post(f"{RUNS}{failed_fetch.pk}/retry-from-batch/", follow=True).content.decode()
    drain(clock)

    assert f"Run {failed_hooks.pk}: the hooks of 1 batch(es) run again." in first
    assert f"Run {failed_fetch.pk}: fetching again from batch 2." in second
    for run, kind in ((failed_hooks, ActionKind.RETRIED_HOOKS),
                      (failed_fetch, ActionKind.RETRIED_FROM_BATCH)):
        run.refresh_from_db()
        assert run.status == RunStatus.SUCCEEDED
        action = run.actions.get(kind=kind)
        assert (action.actor, action.via) == (admin_user, "admin")


def test_the_bulk_actions_say_what_they_did_and_what_was_refused(admin_client, acme):
    running = services.start_ingest(builders.source(acme, "orders"))
    cancelled = services.start_ingest(builders.source(acme, "invoices"))
    services.cancel_run(cancelled)

    response = admin_client.post(RUNS, {"action": "cancel_runs", "_selected_action": [
        running.pk, cancelled.pk]}, follow=True)

    html = response.content.decode()
    assert f"Run {running.pk} cancelled." in html
    assert f"Run {cancelled.pk}: not done. Run {cancelled.pk} is already cancelled." in html
    running.refresh_from_db()
    assert running.status == RunStatus.CANCELLED


def test_the_operations_need_a_post_and_the_permission(acme, clock):
    run = services.start_ingest(builders.source(acme))
    viewer = staff("vera", of=acme)
    viewer.user_permissions.set(Permission.objects.filter(codename__in=["view_ingestrun"]))
    browser = Client()
    browser.force_login(viewer)

    html = page(browser, f"{RUNS}{run.pk}/change/")

    assert "Cancel the run" not in html
    assert browser.get(f"{RUNS}{run.pk}/cancel/").status_code == 405
    assert browser.post(f"{RUNS}{run.pk}/cancel/").status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


# --- sources ----------------------------------------------------------------------------------


def test_a_source_is_added_with_its_hooks_and_its_tenant_is_the_staff_users(alice, acme):
    response = alice.post(f"{SOURCES}add/", source_form())

    assert response.status_code == 302, response.content.decode()
    source = IngestSource.objects.get()
    assert (source.tenant, source.kind, source.config) == (acme, "test_counting", {"batches": 2})
    hook = source.hooks.get()
    assert (hook.name, hook.command) == ("check", ["true"])


@pytest.mark.parametrize("fields, problem", [
    ({"config": '{"batches": 0}'}, "batches: Ensure this value is greater than or equal to 1."),
    ({"config": '{"size": 2}'}, "batches: This field is required."),
    ({"config": "[1, 2]"}, "must be a JSON object"),
    ({"config": "{nope"}, "Enter a valid JSON."),
    ({"kind": "ftp"}, "Select a valid choice. ftp is not one of the available choices."),
    ({"batch_size": "20000"}, "between 1 and 10000"),
    ({"hooks-0-command": '"true"'}, "an argument list of strings"),
    ({"hooks-0-env": "[]"}, "an object of names and values"),
    ({"hooks-0-timeout_seconds": "0"}, "between 1 and 86400 seconds"),
])
def test_a_bad_source_or_hook_is_a_form_error_and_nothing_is_saved(alice, acme, fields, problem):
    response = alice.post(f"{SOURCES}add/", source_form(**fields))

    assert response.status_code == 200
    assert problem in response.content.decode()
    assert not IngestSource.objects.exists()


def test_a_duplicate_name_within_the_tenant_is_a_form_error(alice, acme, globex):
    builders.source(acme, "orders")
    builders.source(globex, "invoices")

    taken = alice.post(f"{SOURCES}add/", source_form())
    free = alice.post(f"{SOURCES}add/", source_form(name="invoices"))

    assert "this tenant already has a source named &#x27;orders&#x27;" in taken.content.decode()
    assert free.status_code == 302
    assert IngestSource.objects.filter(tenant=acme).count() == 2


def test_two_hooks_of_one_name_or_position_are_a_form_error(alice):
    second = {"hooks-TOTAL_FORMS": "2", "hooks-1-name": "check", "hooks-1-position": "1",
              "hooks-1-image": "registry.example/check:2", "hooks-1-command": '["true"]',
              "hooks-1-env": "{}", "hooks-1-timeout_seconds": "60"}

    same_name = alice.post(f"{SOURCES}add/", source_form(**second))
    same_position = alice.post(f"{SOURCES}add/", source_form(**{**second, "hooks-1-name": "lint",
                                                                "hooks-1-position": "0"}))

    assert "Please correct the duplicate data for name" in same_name.content.decode()
    assert "Please correct the duplicate data for position" in same_position.content.decode()
    assert not IngestSource.objects.exists()


def test_an_empty_configuration_is_checked_as_an_empty_object(alice):
    response = alice.post(f"{SOURCES}add/", source_form(config=""))

    assert "batches: This field is required." in response.content.decode()
    assert not IngestSource.objects.exists()


def test_an_operator_renames_a_source_but_never_moves_it_to_another_tenant(admin_client, acme,
                                                                         globex):
    source = builders.source(acme, "orders")
    builders.source(acme, "invoices")
    hook = source.hooks.get()
    change = source_form(name="invoices", tenant=str(globex.pk), **{
        "hooks-INITIAL_FORMS": "1", "hooks-0-id": str(hook.pk), "hooks-0-source": str(source.pk)})

    taken = admin_client.post(f"{SOURCES}{source.pk}/change/", change)
    renamed = admin_client.post(f"{SOURCES}{source.pk}/change/", {**change, "name": "orders-v2"})

    assert "this tenant already has a source named &#x27;invoices&#x27;" in taken.content.decode()
    assert renamed.status_code == 302
    source.refresh_from_db()
    assert (source.name, source.tenant) == ("orders-v2", acme)


def test_the_run_list_searches_by_id_and_source_name(admin_client, acme):
    orders = services.start_ingest(builders.source(acme, "orders"))
    invoices = services.start_ingest(builders.source(acme, "invoices"))

    by_name, by_id = page(admin_client, f"{RUNS}?q=invoice"), page(admin_client, f"{RUNS}?q={orders.pk}")

    assert f"{RUNS}{invoices.pk}/change/" in by_name and f"{RUNS}{orders.pk}/change/" not in by_name
    assert f"{RUNS}{orders.pk}/change/" in by_id


def test_the_kind_is_a_choice_of_the_installed_ingesters(alice):
    html = page(alice, f"{SOURCES}add/")

    assert '<option value="test_counting">Numbered records (tests)</option>' in html
    assert 'name="tenant"' not in html  # a tenant's staff add sources to their own tenant


def test_an_operator_chooses_the_tenant(admin_client, acme):
    response = admin_client.post(f"{SOURCES}add/", source_form(tenant=str(acme.pk)))

    assert response.status_code == 302
    assert IngestSource.objects.get().tenant == acme


def test_the_start_action_starts_runs_as_the_staff_user_and_reports_refusals(admin_client, admin_user,
                                                                             acme):
    orders = builders.source(acme, "orders")
    invoices = builders.source(acme, "invoices")
    busy = services.start_ingest(invoices)

    response = admin_client.post(SOURCES, {"action": "start_runs",
                                           "_selected_action": [orders.pk, invoices.pk]}, follow=True)

    html = response.content.decode()
    run = IngestRun.objects.get(source=orders)
    assert f"Started <a href=\"/admin/ingest/ingestrun/{run.pk}/change/\">run {run.pk}</a> of orders." in html
    assert f"Not started: source &#x27;invoices&#x27; already has run {busy.pk} running." in html
    action = run.actions.get()
    assert (action.kind, action.actor, action.via) == (ActionKind.STARTED, admin_user, "admin")


# --- tenants ----------------------------------------------------------------------------------


def test_tenant_staff_see_only_their_tenants_sources_and_runs(alice, acme, globex):
    mine = services.start_ingest(builders.source(acme, "orders"))
    theirs = services.start_ingest(builders.source(globex, "secret-feed"))

    sources, runs = page(alice, SOURCES), page(alice, RUNS)

    assert "orders" in sources and "secret-feed" not in sources
    assert f'<a href="{RUNS}{mine.pk}/change/">run {mine.pk}</a>' in sources  # its running run
    assert f"{RUNS}{mine.pk}/change/" in runs and f"{RUNS}{theirs.pk}/change/" not in runs
    assert "secret-feed" not in runs  # nor in the source filter's choices
    for url in (f"{RUNS}{theirs.pk}/change/", f"{SOURCES}{theirs.source_id}/change/"):
        assert alice.get(url).status_code == 302  # the admin's "no such object" redirect
    assert alice.get(f"{RUNS}{theirs.pk}/timeline/").status_code == 404
    assert alice.post(f"{RUNS}{theirs.pk}/cancel/").status_code == 404
    alice.post(RUNS, {"action": "cancel_runs", "_selected_action": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.status == RunStatus.RUNNING


# --- breakers ---------------------------------------------------------------------------------


def test_an_open_breaker_shows_its_next_probe_and_closes_by_hand(admin_client, clock):
    for job in range(5):
        breaker.record_failure("kube:conveyor-hooks", job, "429 Too Many Requests", clock.now())

    html = page(admin_client, BREAKERS)

    assert 'class="ingest-status ingest-status-open">open</span>' in html
    assert re.search(r'<time class="ingest-countdown"[^>]*>in 1 min 00 s</time>', html)
    assert "429 Too Many Requests" in html
    row = RunnerBreaker.objects.get()
    response = admin_client.post(BREAKERS, {"action": "close_breakers", "_selected_action": [row.pk]},
                                 follow=True)
    assert "Closed: kube:conveyor-hooks." in response.content.decode()
    row.refresh_from_db()
    assert (row.state, row.failures, row.next_probe_at) == (BreakerState.CLOSED, 0, None)
    assert row.times_opened == 1


def test_the_breakers_are_for_platform_operators(alice, clock):
    breaker.record_failure("kube:conveyor-hooks", 1, "boom", clock.now() - timedelta(seconds=1))

    assert alice.get(BREAKERS).status_code == 403
    assert "runnerbreaker" not in page(alice, "/admin/")
