"""The ingest admin: sources with their hooks, the run page's timeline and its actions,
and the breakers, each scoped to the staff user's tenant."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client

import jobs
from ingest.runs import breaker, services
from ingest.runs.errors import TransientResourceError
from ingest.runs.models import (
    ActionKind,
    BreakerState,
    HookTemplate,
    IngestRun,
    IngestSource,
    RunnerBreaker,
    RunStatus,
)
from ingest.runs.runners.local import LocalRunner
from jobs.models import Job
from tests.support.base import page, staff
from tests.support.history import history_rows
from tests.support.ingest import builders
from tests.support.ingest.running import drain, stalled_after_a_crash

pytestmark = pytest.mark.django_db

SOURCES = "/admin/ingest/ingestsource/"
RUNS = "/admin/ingest/ingestrun/"
BREAKERS = "/admin/ingest/runnerbreaker/"
CATALOGUE = "/admin/ingest/hooktemplate/"
TARGET = "kube:conveyor-hooks"


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


@pytest.fixture
def check(db) -> HookTemplate:
    """The catalogue's entry the forms choose: a level from 1 to 5, and a mode."""
    return builders.entry(
        ["check", "--level", "{level}"],
        "check",
        parameters=[
            {"name": "level", "type": "integer", "min": 1, "max": 5, "required": True},
            {"name": "mode", "type": "choice", "choices": ["fast", "strict"], "default": "fast"},
        ],
    )


def source_form(**fields):
    """The add form's POST data: the source's fields and its hooks' inline (the entry
    named "check")."""
    entry = HookTemplate.objects.filter(name="check").values_list("pk", flat=True).first()
    data = {
        "name": "orders",
        "kind": "test_counting",
        "config": '{"batches": 2}',
        "batch_size": "100",
        "max_failures": "3",
        "enabled": "on",
        "hooks-TOTAL_FORMS": "1",
        "hooks-INITIAL_FORMS": "0",
        "hooks-MIN_NUM_FORMS": "0",
        "hooks-MAX_NUM_FORMS": "1000",
        "hooks-0-name": "check",
        "hooks-0-position": "0",
        "hooks-0-template": str(entry),
        "hooks-0-parameters": '{"level": 3}',
    }
    data.update(fields)
    return data


# --- pages ------------------------------------------------------------------------------------


def test_every_ingest_page_answers_with_rows_in_it(admin_client, acme, clock):
    run = services.start_ingest(builders.source(acme, batches=2))
    drain(clock)
    breaker.record_failure(TARGET, acme.pk, 1, "429 Too Many Requests", clock.now())
    entry = HookTemplate.objects.get()
    for url in [
        SOURCES,
        f"{SOURCES}add/",
        f"{SOURCES}{run.source_id}/change/",
        RUNS,
        f"{RUNS}{run.pk}/change/",
        f"{RUNS}{run.pk}/timeline/",
        BREAKERS,
        f"{BREAKERS}{RunnerBreaker.objects.get(target=TARGET).pk}/change/",
        f"{RUNS}?status=succeeded",
        f"{RUNS}?source__id__exact={run.source_id}",
        CATALOGUE,
        f"{CATALOGUE}add/",
        f"{CATALOGUE}{entry.pk}/change/",
    ]:
        page(admin_client, url)


def test_the_run_list_shows_status_batches_records_failures_and_who(admin_client, admin_user, acme, clock):
    run = services.start_ingest(builders.source(acme, batches=2, size=3), actor=admin_user, via="admin")
    drain(clock)

    listing = page(admin_client, RUNS)

    assert 'class="ingest-status ingest-status-succeeded"' in listing
    assert "2 / 2" in listing and "0 of 3 allowed" in listing
    assert '<td class="field-records_published">6</td>' in listing
    assert f'<td class="field-started_by nowrap">{admin_user.username}</td>' in listing
    assert f"/admin/ingest/ingestrun/{run.pk}/change/" in listing


def test_the_run_page_shows_each_batch_and_each_hook_failure_escaped(admin_client, acme, clock):
    source = builders.source(
        acme,
        batches=2,
        hooks=[builders.PASS, builders.exit_with(3, "<script>alert('row 7')</script>")],
        max_failures=2,
    )
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
    # The action log: who did what, through what, and the run's move.
    started, failed = history_rows(html)
    assert (started["what"], started["by"], started["via"], started["change"]) == (
        "started",
        "—",
        "api",
        "— → running",
    )
    assert (failed["what"], failed["via"], failed["change"]) == ("failed", "pipeline", "running → failed")
    assert "reached the run" in failed["message"]
    # A failed run offers the retry of its hooks; it cannot be cancelled any more.
    assert "Retry the failed hooks" in html and "Cancel the run" not in html


def test_the_run_page_shows_staff_the_whole_error_of_the_job_a_run_stalled_on(
    admin_client, acme, clock, monkeypatch
):
    run = stalled_after_a_crash(acme, clock, monkeypatch)
    job = Job.objects.get(pipeline_id=run.pipeline, state="failed")

    html = page(admin_client, f"{RUNS}{run.pk}/change/")

    assert f"ingest.RunIngester #{job.pk}: RuntimeError: the parser lost its place" in html
    assert f'<a href="/admin/jobs/job/{job.pk}/change/">#{job.pk}</a>' in html
    assert "File &quot;" in html and "handlers.py" in html  # the traceback's frames


def test_the_run_page_counts_down_to_a_hook_deliverys_next_attempt(admin_client, acme, clock, monkeypatch):
    def busy(self, spec):
        raise TransientResourceError("0/3 nodes are available")

    monkeypatch.setattr(LocalRunner, "launch", busy)
    run = services.start_ingest(builders.source(acme, batches=1))
    jobs.run_until_idle()

    html = page(admin_client, f"{RUNS}{run.pk}/timeline/")

    assert "attempt 1 of 6, next attempt" in html
    assert re.search(
        r'<time class="ingest-countdown" datetime="[^"]+" title="[^"]+">in 1 min 00 s</time>', html
    )
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
    logged = LogEntry.objects.get()
    assert (logged.user, logged.object_id) == (admin_user, str(run.pk))
    assert logged.change_message == "Cancel the run via the admin"
    again = admin_client.post(f"{RUNS}{run.pk}/cancel/", follow=True).content.decode()
    assert f"Run {run.pk}: not done. Run {run.pk} is already cancelled." in again
    assert LogEntry.objects.count() == 1  # a refused action leaves no entry


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
    for run, kind in (
        (failed_hooks, ActionKind.RETRIED_HOOKS),
        (failed_fetch, ActionKind.RETRIED_FROM_BATCH),
    ):
        run.refresh_from_db()
        assert run.status == RunStatus.SUCCEEDED
        action = run.actions.get(kind=kind)
        assert (action.actor, action.via) == (admin_user, "admin")


def test_the_bulk_actions_say_what_they_did_and_what_was_refused(admin_client, acme):
    running = services.start_ingest(builders.source(acme, "orders"))
    cancelled = services.start_ingest(builders.source(acme, "invoices"))
    services.cancel_run(cancelled)

    response = admin_client.post(
        RUNS, {"action": "cancel_runs", "_selected_action": [running.pk, cancelled.pk]}, follow=True
    )

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


def test_a_source_is_added_with_its_hooks_and_its_tenant_is_the_staff_users(alice, acme, check):
    response = alice.post(f"{SOURCES}add/", source_form())

    assert response.status_code == 302, response.content.decode()
    source = IngestSource.objects.get()
    # The config as the ingester checked it: its defaults filled in.
    assert (source.tenant, source.kind, source.config) == (
        acme,
        "test_counting",
        {"batches": 2, "size": 2, "transient": False},
    )
    hook = source.hooks.get()
    assert (hook.name, hook.template, hook.parameters) == ("check", check, {"level": 3})


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"config": '{"batches": 0}'}, "batches: Ensure this value is greater than or equal to 1."),
        ({"config": '{"size": 2}'}, "batches: This field is required."),
        ({"config": "[1, 2]"}, "must be a JSON object"),
        ({"config": "{nope"}, "Enter a valid JSON."),
        ({"kind": "ftp"}, "Select a valid choice. ftp is not one of the available choices."),
        ({"batch_size": "20000"}, "between 1 and 10000"),
        ({"hooks-0-parameters": "{}"}, "parameter &#x27;level&#x27; is required"),
        ({"hooks-0-parameters": '{"level": 9}'}, "parameter &#x27;level&#x27; is above 5"),
        ({"hooks-0-parameters": '{"level": "3"}'}, "parameter &#x27;level&#x27; must be a whole number"),
        (
            {"hooks-0-parameters": '{"level": 3, "mode": "rm -rf"}'},
            "parameter &#x27;mode&#x27; must be one of fast, strict",
        ),
        ({"hooks-0-parameters": '{"level": 3, "image": "evil:1"}'}, "unknown parameter &#x27;image&#x27;"),
        ({"hooks-0-parameters": "[]"}, "an object of parameter names and values"),
        ({"hooks-0-template": ""}, "This field is required."),
    ],
)
def test_a_bad_source_or_hook_is_a_form_error_and_nothing_is_saved(alice, acme, check, fields, problem):
    response = alice.post(f"{SOURCES}add/", source_form(**fields))

    assert response.status_code == 200
    assert problem in response.content.decode()
    assert not IngestSource.objects.exists()


def test_a_duplicate_name_within_the_tenant_is_a_form_error(alice, acme, globex, check):
    builders.source(acme, "orders")
    builders.source(globex, "invoices")

    taken = alice.post(f"{SOURCES}add/", source_form())
    free = alice.post(f"{SOURCES}add/", source_form(name="invoices"))

    assert "this tenant already has a source named &#x27;orders&#x27;" in taken.content.decode()
    assert free.status_code == 302
    assert IngestSource.objects.filter(tenant=acme).count() == 2


def test_two_hooks_of_one_name_or_position_are_a_form_error(alice, check):
    second = {
        "hooks-TOTAL_FORMS": "2",
        "hooks-1-name": "check",
        "hooks-1-position": "1",
        "hooks-1-template": str(check.pk),
        "hooks-1-parameters": '{"level": 1}',
    }

    same_name = alice.post(f"{SOURCES}add/", source_form(**second))
    same_position = alice.post(
        f"{SOURCES}add/", source_form(**{**second, "hooks-1-name": "lint", "hooks-1-position": "0"})
    )

    assert "Please correct the duplicate data for name" in same_name.content.decode()
    assert "Please correct the duplicate data for position" in same_position.content.decode()
    assert not IngestSource.objects.exists()


def test_an_empty_configuration_is_checked_as_an_empty_object(alice, check):
    response = alice.post(f"{SOURCES}add/", source_form(config=""))

    assert "batches: This field is required." in response.content.decode()
    assert not IngestSource.objects.exists()


def test_an_operator_renames_a_source_but_never_moves_it_to_another_tenant(admin_client, acme, globex):
    source = builders.source(acme, "orders")
    builders.source(acme, "invoices")
    hook = source.hooks.get()
    change = source_form(
        name="invoices",
        tenant=str(globex.pk),
        **{
            "hooks-INITIAL_FORMS": "1",
            "hooks-0-id": str(hook.pk),
            "hooks-0-source": str(source.pk),
            "hooks-0-name": hook.name,
            "hooks-0-template": str(hook.template_id),
            "hooks-0-parameters": "{}",
        },
    )

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


def test_an_operator_chooses_the_tenant(admin_client, acme, check):
    response = admin_client.post(f"{SOURCES}add/", source_form(tenant=str(acme.pk)))

    assert response.status_code == 302
    assert IngestSource.objects.get().tenant == acme


def test_the_start_action_starts_runs_as_the_staff_user_and_reports_refusals(admin_client, admin_user, acme):
    orders = builders.source(acme, "orders")
    invoices = builders.source(acme, "invoices")
    busy = services.start_ingest(invoices)

    response = admin_client.post(
        SOURCES, {"action": "start_runs", "_selected_action": [orders.pk, invoices.pk]}, follow=True
    )

    html = response.content.decode()
    run = IngestRun.objects.get(source=orders)
    assert f'Started <a href="/admin/ingest/ingestrun/{run.pk}/change/">run {run.pk}</a> of orders.' in html
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


def test_an_open_breaker_shows_its_tenant_and_next_probe_and_closes_by_hand(admin_client, acme, clock):
    for job in range(5):
        breaker.record_failure(TARGET, acme.pk, job, "429 Too Many Requests", clock.now())

    html = page(admin_client, BREAKERS)

    assert 'class="ingest-status ingest-status-open">open</span>' in html
    assert re.search(r'<time class="ingest-countdown"[^>]*>in 1 min 00 s</time>', html)
    assert "429 Too Many Requests" in html
    assert '<td class="field-tenant nowrap">Acme</td>' in html
    row = RunnerBreaker.objects.get()
    response = admin_client.post(
        BREAKERS, {"action": "close_breakers", "_selected_action": [row.pk]}, follow=True
    )
    assert f"Closed: {TARGET} for Acme." in response.content.decode()
    row.refresh_from_db()
    assert (row.state, row.failures, row.next_probe_at) == (BreakerState.CLOSED, 0, None)
    assert row.times_opened == 1
    assert LogEntry.objects.get(object_id=str(row.pk)).change_message == "Close the breaker via the admin"


def test_tenant_staff_see_their_own_breakers_and_cannot_close_them(alice, acme, globex, clock):
    for job in range(5):
        breaker.record_failure(TARGET, acme.pk, job, "acme's pods evicted", clock.now())
        breaker.record_failure(TARGET, globex.pk, job, "globex's pods evicted", clock.now())
    theirs = RunnerBreaker.objects.get(tenant=globex)
    mine = RunnerBreaker.objects.get(tenant=acme)

    html = page(alice, BREAKERS)

    assert "acme&#x27;s pods evicted" in html and "globex" not in html.lower()
    assert alice.get(f"{BREAKERS}{theirs.pk}/change/").status_code == 302  # no such object
    page(alice, f"{BREAKERS}{mine.pk}/change/")
    assert "close_breakers" not in html
    alice.post(BREAKERS, {"action": "close_breakers", "_selected_action": [mine.pk]})
    mine.refresh_from_db()
    assert mine.state == BreakerState.OPEN


# --- the hook catalogue -----------------------------------------------------------------------


def entry_form(**fields):
    data = {
        "name": "lint",
        "description": "",
        "enabled": "on",
        "image": "hooks/lint:1",
        "command": '["lint", "--max", "{max}"]',
        "parameters": '[{"name": "max", "type": "integer", "min": 1, "max": 100, "default": 10}]',
        "env": '{"LINT_STRICT": "1"}',
        "cpu_request": "250m",
        "cpu_limit": "1",
        "memory_request": "128Mi",
        "memory_limit": "512Mi",
        "timeout_seconds": "300",
    }
    data.update(fields)
    return data


def test_an_operator_adds_an_entry_offered_to_some_tenants(admin_client, acme):
    response = admin_client.post(f"{CATALOGUE}add/", entry_form(tenants=[str(acme.pk)]))

    assert response.status_code == 302, response.content.decode()
    entry = HookTemplate.objects.get()
    assert (entry.command, entry.env, entry.memory_limit) == (
        ["lint", "--max", "{max}"],
        {"LINT_STRICT": "1"},
        "512Mi",
    )
    assert list(entry.tenants.all()) == [acme]


@pytest.mark.parametrize(
    "fields, problem",
    [
        (
            {"parameters": '[{"name": "max", "type": "float"}]'},
            "parameter &#x27;max&#x27;: type &#x27;float&#x27; is not one of "
            "string, integer, boolean, choice",
        ),
        (
            {"parameters": '[{"name": "max", "type": "integer", "min": 1, "max": 100, "default": 500}]'},
            "parameter &#x27;max&#x27;: its default is above 100",
        ),
        (
            {"parameters": '[{"name": "max", "type": "string", "max_length": 5, "pattern": "^(a$"}]'},
            "parameter &#x27;max&#x27;: pattern is not a regular expression",
        ),
        (
            {"parameters": '[{"name": "max", "type": "string", "max_length": 5, "pattern": "[a-z]+"}]'},
            "parameter &#x27;max&#x27;: pattern is a regular expression anchored with ^ and $",
        ),
        (
            {"parameters": '[{"name": "max", "type": "choice", "choices": []}]'},
            "parameter &#x27;max&#x27;: choices is a list of 1 to 100 texts",
        ),
        (
            {"parameters": '[{"name": "max", "type": "integer", "maximum": 3}]'},
            "parameter &#x27;max&#x27;: unknown key &#x27;maximum&#x27;",
        ),
        ({"command": '["sh", "-c", "lint --max {max}"]'}, "would read its arguments as code"),
        ({"command": '["python", "-c", "{max}"]'}, "which would make the parameter code"),
        ({"command": '["lint", "--level", "{level}"]'}, "{level} names no declared parameter"),
        ({"command": '"lint"'}, "an argument list of 1 to 256 non-empty strings"),
        ({"env": '{"INGEST_BATCH_URL": "/etc/passwd"}'}, "are set by the pipeline"),
        ({"cpu_limit": "lots"}, "&#x27;lots&#x27; is not a Kubernetes quantity"),
        ({"memory_limit": "1Ti"}, "1Ti is above the most allowed, 16Gi"),
        ({"cpu_request": "2", "cpu_limit": "500m"}, "2 is above its limit 500m"),
        ({"timeout_seconds": "99999"}, "between 1 and 7200 seconds"),
    ],
)
def test_a_bad_entry_is_a_form_error_naming_what_is_wrong(admin_client, fields, problem):
    response = admin_client.post(f"{CATALOGUE}add/", entry_form(**fields))

    assert response.status_code == 200
    assert problem in response.content.decode()
    assert not HookTemplate.objects.exists()


def test_tenant_staff_see_the_entries_offered_to_them_read_only(alice, acme, globex):
    shared = builders.entry(["check"], "shared-check", env={"SECRET_LEVEL": "9"})
    own = builders.entry(["check"], "acme-check", tenants=[acme, globex])
    hidden = builders.entry(["check"], "globex-only", tenants=[globex])
    builders.entry(["check"], "switched-off", enabled=False)

    listing = page(alice, CATALOGUE)
    detail = page(alice, f"{CATALOGUE}{own.pk}/change/")

    assert "shared-check" in listing and "acme-check" in listing
    assert "globex-only" not in listing and "switched-off" not in listing
    assert "Globex" not in detail  # which other tenants are offered it is not theirs to know
    assert "SECRET_LEVEL" not in page(alice, f"{CATALOGUE}{shared.pk}/change/")
    assert 'name="image"' not in detail  # read only
    assert alice.get(f"{CATALOGUE}{hidden.pk}/change/").status_code == 302
    assert alice.get(f"{CATALOGUE}add/").status_code == 403
    alice.post(f"{CATALOGUE}{own.pk}/change/", entry_form(name="acme-check", image="evil:1"))
    own.refresh_from_db()
    assert own.image == "registry.example/hooks:1"


def test_a_hook_may_use_only_an_enabled_entry_offered_to_its_tenant(alice, acme, globex, check):
    withdrawn = builders.entry(["check"], "globex-only", tenants=[globex])
    disabled = builders.entry(["check"], "disabled", enabled=False)
    builders.entry(
        ["check"],
        "described",
        parameters=[{"name": "note", "type": "boolean", "description": "<script>alert(1)</script>"}],
    )

    for entry in (withdrawn, disabled):
        response = alice.post(
            f"{SOURCES}add/", source_form(**{"hooks-0-template": str(entry.pk), "hooks-0-parameters": "{}"})
        )
        assert "Select a valid choice" in response.content.decode()
    assert not IngestSource.objects.exists()
    form = page(alice, f"{SOURCES}add/")
    assert (
        "check: level (integer, required; 1 to 5); mode (choice, default &quot;fast&quot;; "
        "one of fast, strict)" in form
    )
    assert "globex-only" not in form
    assert "note (boolean, optional; true or false): &lt;script&gt;alert(1)&lt;/script&gt;" in form
    assert "<script>alert(1)" not in form


def test_an_operator_may_give_a_source_only_entries_offered_to_its_tenant(admin_client, acme, globex):
    theirs = builders.entry(["check"], "globex-only", tenants=[globex])

    response = admin_client.post(
        f"{SOURCES}add/",
        source_form(tenant=str(acme.pk), **{"hooks-0-template": str(theirs.pk), "hooks-0-parameters": "{}"}),
    )

    assert "Select a valid choice" in response.content.decode()  # not among Acme's entries
    assert not IngestSource.objects.exists()


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"enabled": False}, "is disabled"),
        ({"tenants": "globex"}, "is not offered to this tenant"),
    ],
)
def test_a_source_saves_with_a_hook_left_as_it_was_after_its_entry_changed(
    alice, acme, globex, change, problem
):
    source = builders.source(acme, "orders")
    hook = source.hooks.get()
    if "tenants" in change:
        hook.template.tenants.set([globex])
    else:
        HookTemplate.objects.filter(pk=hook.template_id).update(**change)
    form = source_form(
        name="orders-v2",
        **{
            "hooks-INITIAL_FORMS": "1",
            "hooks-0-id": str(hook.pk),
            "hooks-0-source": str(source.pk),
            "hooks-0-name": hook.name,
            "hooks-0-template": str(hook.template_id),
            "hooks-0-parameters": "{}",
            "initial-hooks-0-parameters": "{}",
        },
    )

    kept = alice.post(f"{SOURCES}{source.pk}/change/", form)
    moved = alice.post(f"{SOURCES}{source.pk}/change/", {**form, "hooks-0-name": "renamed"})

    assert kept.status_code == 302  # its runs say what is wrong with the entry
    assert problem in moved.content.decode()
    hook.refresh_from_db()
    assert hook.name == "hook0"
