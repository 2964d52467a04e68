"""The jobs admin: every page answers, filters find the right rows, operator actions go
through the engine and are recorded with the staff user, tenants stay apart, and the job
list stays cheap (bounded queries, no whole-table COUNT)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models import Model
from django.http import HttpResponse
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import jobs
from console.admin import CappedCountPaginator, operations, rendering
from console.admin.job import TIMELINE_LIMIT
from ingest.runs.models import HookTemplate
from jobs import engine
from jobs.models import Job, JobEvent, Worker
from tests.support.base import make_job, staff, tenant
from tests.support.history import history_rows
from tests.support.jobs.builders import failed, grant, messages_of, operator, rows, running

pytestmark = pytest.mark.django_db

State = Job.State
Kind = JobEvent.Kind
CHANGELIST = "admin:jobs_job_changelist"


# --- builders ----------------------------------------------------------------------------


def cancelled(**options: Any) -> Job:
    return engine.cancel(make_job("tests.noop", **options))


def pending_later(**options: Any) -> Job:
    return make_job("tests.noop", run_after=timezone.now() + timedelta(hours=1), **options)


def change_url(job: Job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def operation_url(job: Job, name: str) -> str:
    return reverse(f"admin:jobs_job_{name}", args=[job.pk])


# --- every registered admin page answers ----------------------------------------------------


def _builders(admin_user: User) -> dict[str, Callable[[], Model]]:
    """One object per registered model whose change page should be shown."""
    from django_q.models import OrmQ, Schedule, Task
    from django_q.signing import SignedPackage
    from rest_framework.authtoken.models import Token, TokenProxy

    def task(success: bool) -> Callable[[], Model]:
        return lambda: Task.objects.create(
            id=uuid.uuid4().hex,
            name=f"task-{success}",
            func="math.floor",
            started=timezone.now(),
            stopped=timezone.now(),
            success=success,
        )

    def token() -> Model:
        Token.objects.create(user=admin_user)
        return TokenProxy.objects.get(user=admin_user)

    return {
        "jobs.job": lambda: make_job("tests.noop", {"n": 1}),
        "jobs.event": lambda: jobs.publish("OrderPlaced", {"order": 1}),
        "jobs.worker": lambda: Worker.objects.create(
            name="w-smoke", hostname="h", pid=1, started_at=timezone.now(), last_seen_at=timezone.now()
        ),
        "tenancy.tenant": lambda: tenant("Smoke"),
        "tenancy.membership": lambda: staff("member", of=tenant("Smoke")).membership,
        "auth.user": lambda: admin_user,
        "auth.group": lambda: Group.objects.create(name="operators"),
        "django_q.schedule": lambda: Schedule.objects.create(func="math.floor", name="smoke"),
        "django_q.success": task(True),
        "django_q.failure": task(False),
        "django_q.ormq": lambda: OrmQ.objects.create(
            key="default", payload=SignedPackage.dumps({"id": "x", "func": "math.floor"})
        ),
        "authtoken.tokenproxy": token,
        "ingest.hooktemplate": lambda: HookTemplate.objects.create(
            name="smoke",
            image="hooks:1",
            command=["check", "{level}"],
            parameters=[{"name": "level", "type": "integer", "default": 1}],
        ),
    }


def test_every_registered_admin_page_answers(admin_client, admin_user):
    builders = _builders(admin_user)
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    shown_change = set()
    for model, model_admin in admin.site._registry.items():
        label = model._meta.label_lower
        prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        assert admin_client.get(reverse(f"{prefix}_changelist")).status_code == 200, label
        if model_admin.has_add_permission(request):
            assert admin_client.get(reverse(f"{prefix}_add")).status_code == 200, label
        build = builders.get(label, model._default_manager.first)
        obj = build()
        if obj is not None:
            url = reverse(f"{prefix}_change", args=[obj.pk])
            assert admin_client.get(url).status_code == 200, label
            shown_change.add(label)
    assert {
        "jobs.job",
        "jobs.event",
        "jobs.worker",
        "tenancy.tenant",
        "tenancy.membership",
        "django_q.schedule",
        "ingest.hooktemplate",
    } <= shown_change


# --- the list and its filters ------------------------------------------------------------


def test_the_state_filter_lists_only_jobs_in_that_state(admin_client, clock):
    waiting = make_job()
    broken = failed()
    response = admin_client.get(reverse(CHANGELIST), {"state__exact": "failed"})
    assert rows(response) == [broken.pk]
    response = admin_client.get(reverse(CHANGELIST), {"state__exact": "pending"})
    assert rows(response) == [waiting.pk]


def test_failed_in_the_last_hour_lists_recent_failures_only(admin_client, clock):
    long_ago = failed()
    clock.advance(2 * 3600)
    recent = failed()
    make_job()

    response = admin_client.get(reverse(CHANGELIST), {"failed_within": "1h"})

    assert rows(response) == [recent.pk]
    assert long_ago.pk in rows(admin_client.get(reverse(CHANGELIST), {"failed_within": "24h"}))


def test_the_rescued_filter_lists_jobs_taken_back_from_dead_workers(admin_client, clock):
    rescued = failed()
    Job.objects.filter(pk=rescued.pk).update(rescues=2)
    failed()
    make_job()
    assert rows(admin_client.get(reverse(CHANGELIST), {"rescued": "yes"})) == [rescued.pk]
    # A value the filter does not offer is the admin's "?e=1" redirect, not a 500.
    assert admin_client.get(reverse(CHANGELIST), {"rescued": "maybe"}).status_code == 302


def test_the_list_shows_each_jobs_last_error_line(admin_client, clock):
    job = failed(error="ValueError: row 3 has no unit " + "x" * 80 + "\n  File handlers.py")
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    row = page[page.index(f'value="{job.pk}"') :]
    line = "ValueError: row 3 has no unit " + "x" * 80
    assert f'<span class="job-cut job-error-line" title="{line}">{line}</span>' in row


def test_the_pipeline_link_lists_that_pipelines_jobs(admin_client, clock):
    pipeline = uuid.uuid4()
    first = make_job(pipeline=pipeline)
    second = make_job(pipeline=pipeline)
    make_job()
    link = f"{reverse(CHANGELIST)}?pipeline={pipeline}"
    assert link in admin_client.get(reverse(CHANGELIST)).content.decode()

    response = admin_client.get(link)

    assert rows(response) == [second.pk, first.pk]


def test_an_invalid_pipeline_id_is_refused(admin_client):
    response = admin_client.get(reverse(CHANGELIST), {"pipeline": "not-a-uuid"})
    assert response.status_code == 302
    assert response.url.endswith("?e=1")


def test_the_type_and_queue_filters_offer_choices_without_reading_jobs(admin_client):
    make_job("tests.keyed", queue="reports")
    response = admin_client.get(reverse(CHANGELIST), {"type": "tests.keyed"})
    filters = {spec.title: spec for spec in response.context["cl"].filter_specs}
    assert ("tests.noop", "tests.noop") in filters["type"].lookup_choices
    assert len(rows(response)) == 1
    assert rows(admin_client.get(reverse(CHANGELIST), {"queue": "reports"})) == rows(response)


@pytest.mark.parametrize("term", ["id", "#id", "type", "pipeline", "concurrency", "unique"])
def test_search_finds_a_job_by_exact_identifiers(admin_client, term):
    job = make_job("tests.keyed", concurrency_key="acct-7", unique_key="import-42")
    make_job("tests.noop")
    query = {
        "id": str(job.pk),
        "#id": f"#{job.pk}",
        "type": "tests.keyed",
        "pipeline": str(job.pipeline_id),
        "concurrency": "acct-7",
        "unique": "import-42",
    }[term]
    assert rows(admin_client.get(reverse(CHANGELIST), {"q": query})) == [job.pk]


# --- the detail page -------------------------------------------------------------------------


def test_the_job_page_shows_payload_why_and_history(admin_client, clock):
    job = failed(payload={"rows": [1, 2]})
    engine.retry(job, actor=User.objects.get(username="admin"), reason="input fixed")

    page = admin_client.get(change_url(job)).content.decode()

    assert "&quot;rows&quot;: [\n    1,\n    2\n  ]" in page
    assert "no live worker serves queue &#x27;default&#x27;" in page  # the why line
    claimed, failed_, retried = history_rows(page)
    assert (claimed["what"], claimed["change"], claimed["worker"], claimed["by"]) == (
        "Claimed",
        "pending → running",
        "w1",  # the claim, by the worker
        "—",
    )
    assert (failed_["kind"], failed_["message"]) == ("failed", "boom")
    assert (retried["what"], retried["change"], retried["by"], retried["via"], retried["message"]) == (
        "Retried by an operator",
        "failed → pending",
        "admin",  # the retry, by the operator
        "—",  # the engine called directly, not through a door
        "input fixed",
    )


def test_the_job_page_shows_the_last_error_preformatted(admin_client, clock):
    job = failed(error="Traceback <x>\nValueError: row 3")
    page = admin_client.get(change_url(job)).content.decode()
    assert '<pre class="job-error">Traceback &lt;x&gt;\nValueError: row 3</pre>' in page
    assert "failed (Permanent): ValueError: row 3; retry it to run again" in page


def test_the_job_page_links_parent_children_and_pipeline(admin_client, clock):
    parent = make_job()
    child = make_job(parent=parent, pipeline=parent.pipeline_id)
    page = admin_client.get(change_url(parent)).content.decode()
    assert change_url(child) in page
    assert f"?pipeline={parent.pipeline_id}" in page
    assert change_url(parent) in admin_client.get(change_url(child)).content.decode()


def test_the_job_page_links_its_pipeline_instead_of_listing_its_jobs(admin_client, clock):
    job = make_job()
    siblings = [make_job(pipeline=job.pipeline_id) for _ in range(40)]
    page = admin_client.get(change_url(job)).content.decode()
    assert reverse("admin:jobs_job_pipeline", args=[job.pipeline_id]) in page
    assert "(41 jobs: " in page and f"?pipeline={job.pipeline_id}" in page
    assert not any(change_url(sibling) in page for sibling in siblings)


def test_the_history_folds_progress_and_keeps_the_state_changes(admin_client, clock):
    job = running()
    for step in range(1, 101):
        engine.record_progress(job.pk, job.lease_token, step * 20_000, 2_000_000, f"batch {step}")
    engine.recover(job)  # the row that matters among a hundred progress steps
    page = admin_client.get(change_url(job)).content.decode()
    assert 'data-kind="progress"' not in page
    assert '<tr class="history-row" data-kind="recovered">' in page
    assert "100 progress steps folded" in page and "2,000,000/2,000,000 batch 100" in page
    assert "2,000,000/2,000,000 (100%)" in page  # thousands separators in the field
    assert "column-detail_shown" not in page  # no row has a detail: no empty column


TRACEBACK_ERROR = (
    "TransientError: HTTP 503 from the API\n"
    '  File "/srv/conveyor/jobs/registry.py", line 66, in __call__\n'
    "    return self.func(ctx)\n"
    "           ^^^^^^^^^^^^^^"
)


def test_a_history_message_shows_its_first_line_and_folds_the_traceback(admin_client, clock):
    job = running(max_attempts=3)
    engine.fail(job, job.lease_token, TRACEBACK_ERROR, worker="w1")  # a retry is scheduled
    page = admin_client.get(change_url(job)).content.decode()
    row = page[page.index('<tr class="history-row" data-kind="retry_scheduled">') :]
    row = row[: row.index("</tr>")]
    cell = row[row.index('class="field-message_shown"') :]
    head, folded = cell.split("<details", 1)
    assert "TransientError: HTTP 503 from the API" in head and "registry.py" not in head
    assert "<summary>the whole message</summary>" in folded
    assert "line 66, in __call__\n    return self.func(ctx)" in folded  # whole, its lines kept


def test_a_one_line_history_message_has_nothing_folded(admin_client, clock):
    job = failed(error="ValueError: bad row")
    page = admin_client.get(change_url(job)).content.decode()
    row = page[page.index('<tr class="history-row" data-kind="failed">') :]
    row = row[: row.index("</tr>")]
    assert '<span class="history-message">ValueError: bad row</span></td>' in row
    assert "<details" not in row


def test_a_long_history_shows_its_newest_rows_and_counts_the_rest(admin_client, clock):
    job = make_job()
    JobEvent.objects.bulk_create(
        JobEvent(job=job, at=clock.now(), kind=JobEvent.Kind.RUN_NOW, message=f"step {n}")
        for n in range(TIMELINE_LIMIT + 4)
    )

    page = admin_client.get(change_url(job)).content.decode()

    rows = history_rows(page)
    assert len(rows) == TIMELINE_LIMIT and rows[-1]["message"] == f"step {TIMELINE_LIMIT + 3}"
    assert rows[0]["message"] == "step 4"  # the four oldest left out
    assert "4 earlier entries not shown." in page


def test_a_progress_row_is_numbered_with_its_attempt(clock):
    job = running()
    engine.record_progress(job.pk, job.lease_token, 5, 10, "halfway", worker="w1")
    assert job.events.get(kind=JobEvent.Kind.PROGRESS).attempt == 1


def test_the_job_page_offers_only_the_actions_its_state_allows(admin_client, clock):
    job = make_job()
    page = admin_client.get(change_url(job)).content.decode()
    assert operation_url(job, "cancel") in page and operation_url(job, "run_now") in page
    assert operation_url(job, "recover") in page  # a pending job nobody picked up
    assert operation_url(job, "retry") not in page


def test_a_view_only_user_sees_no_action_buttons(client, clock):
    client.force_login(grant(staff("viv", operator=True), "view_job"))
    job = make_job()
    page = client.get(change_url(job)).content.decode()
    assert operation_url(job, "cancel") not in page
    assert client.post(operation_url(job, "cancel")).status_code == 403
    job.refresh_from_db()
    assert job.state == State.PENDING


# --- per-job actions ----------------------------------------------------------------------


ONE_JOB_CASES = {
    "recover": (running, State.PENDING, Kind.RECOVERED),
    "retry": (failed, State.PENDING, Kind.RETRIED),
    "cancel": (make_job, State.CANCELLED, Kind.CANCELLED),
    "run_now": (pending_later, State.PENDING, Kind.RUN_NOW),
}


@pytest.mark.parametrize("name", ONE_JOB_CASES)
def test_a_detail_button_changes_the_job_through_the_engine(client, clock, name):
    build, to_state, kind = ONE_JOB_CASES[name]
    olga = operator()
    client.force_login(olga)
    job = build()

    response = client.post(operation_url(job, name), {"reason": "ticket 12"})

    assert response.status_code == 302 and response.url == change_url(job)
    job.refresh_from_db()
    assert job.state == to_state
    event = job.events.get(kind=kind)
    assert (event.actor, event.via, event.message) == (olga, "admin", "ticket 12")
    entry = LogEntry.objects.get(object_id=str(job.pk), action_flag=CHANGE)
    assert entry.user == olga and "via the admin: ticket 12" in entry.change_message
    assert f"Job {job.pk} {operations.OPERATIONS[name].past}." in messages_of(response)


def alive(worker: str, clock) -> None:
    Worker.objects.update_or_create(
        name=worker,
        defaults={"hostname": "h", "pid": 1, "started_at": clock.now(), "last_seen_at": clock.now()},
    )


@pytest.mark.parametrize("name", ["recover", "cancel"])
def test_taking_a_job_from_a_live_worker_is_asked_twice(client, clock, name):
    client.force_login(operator())
    job = running()
    alive("w1", clock)

    page = client.post(operation_url(job, name), {"reason": "looks stuck"})
    assert page.status_code == 200
    text = page.content.decode()
    assert "worker w1 is alive (seen 0 s ago)" in text and 'name="confirm" value="yes"' in text
    assert 'value="looks stuck"' in text  # the reason is carried to the second click
    job.refresh_from_db()
    assert job.state == State.RUNNING and not job.events.filter(actor__isnull=False).exists()

    script = client.post(operation_url(job, name), HTTP_ACCEPT="application/json")
    assert script.status_code == 409 and script.json()["confirm"] is True

    done = client.post(operation_url(job, name), {"reason": "looks stuck", "confirm": "yes"})
    assert done.status_code == 302
    job.refresh_from_db()
    assert job.state != State.RUNNING


def test_a_job_whose_worker_is_gone_is_recovered_at_once(client, clock):
    client.force_login(operator())
    job = running()
    alive("w1", clock)
    clock.advance(60)  # no heartbeat since: the worker is stale, the lease expired
    assert client.post(operation_url(job, "recover")).status_code == 302
    job.refresh_from_db()
    assert job.state == State.PENDING


def test_the_job_page_shows_the_leases_health_next_to_the_buttons(admin_client, clock):
    job = running()
    alive("w1", clock)
    page = admin_client.get(change_url(job)).content.decode()
    assert "job-lease-alive" in page and "Recover and Cancel ask for confirmation" in page
    clock.advance(60)
    page = admin_client.get(change_url(job)).content.decode()
    assert "job-lease-lost" in page and "worker w1 was last seen at" in page


def test_run_now_makes_a_scheduled_job_due(client, clock):
    client.force_login(operator())
    job = pending_later()
    client.post(operation_url(job, "run_now"))
    job.refresh_from_db()
    assert job.run_after <= clock.now()


def test_an_illegal_button_is_reported_and_changes_nothing(client, clock):
    client.force_login(operator())
    job = make_job()

    response = client.post(operation_url(job, "retry"))

    assert response.status_code == 302
    assert any(
        "was not retried" in m and "needs a job that is failed or cancelled" in m
        for m in messages_of(response)
    )
    job.refresh_from_db()
    assert job.state == State.PENDING
    assert not job.events.filter(kind=Kind.RETRIED).exists()
    assert not LogEntry.objects.exists()


def test_action_urls_accept_only_post(client, clock):
    client.force_login(operator())
    job = make_job()
    assert client.get(operation_url(job, "cancel")).status_code == 405
    job.refresh_from_db()
    assert job.state == State.PENDING


# --- bulk actions ----------------------------------------------------------------------------


def bulk(client: Any, action: str, jobs_: list[Job], **extra: Any) -> HttpResponse:
    data = {"action": action, "_selected_action": [job.pk for job in jobs_], **extra}
    if "post" not in extra:
        data["index"] = 0
    return client.post(reverse(CHANGELIST), data)


def test_the_bulk_preview_lists_the_jobs_to_touch_and_the_skipped_ones(client, clock):
    client.force_login(operator())
    stuck = [running(), running()]
    waiting = failed()

    response = bulk(client, "recover_jobs", [*stuck, waiting])

    assert response.status_code == 200
    assert response.templates[0].name == "admin/jobs/job/action_confirmation.html"
    assert [job.pk for job in response.context["touch"]] == sorted(j.pk for j in stuck)
    assert [job.pk for job in response.context["skip"]] == [waiting.pk]
    page = response.content.decode()
    assert "Recover 2 jobs" in page and "Skipped: 1 job" in page
    assert f'name="_selected_action" value="{waiting.pk}"' not in page
    assert not Job.objects.filter(pk__in=[j.pk for j in stuck], state=State.PENDING).exists()
    assert not LogEntry.objects.exists()


def test_selecting_all_matching_jobs_previews_exactly_those_jobs(client, clock):
    client.force_login(operator())
    waiting = [make_job(), make_job()]
    failed()
    url = f"{reverse(CHANGELIST)}?state__exact=pending"

    response = client.post(
        url, {"action": "cancel_jobs", "index": 0, "select_across": 1, "_selected_action": [waiting[0].pk]}
    )

    assert [job.pk for job in response.context["touch"]] == [job.pk for job in waiting]
    assert response.context["skip"] == []


BULK_CASES = {
    "recover_jobs": (running, State.PENDING, Kind.RECOVERED, failed),
    "retry_jobs": (failed, State.PENDING, Kind.RETRIED, make_job),
    "cancel_jobs": (make_job, State.CANCELLED, Kind.CANCELLED, failed),
    "run_jobs_now": (pending_later, State.PENDING, Kind.RUN_NOW, cancelled),
}


@pytest.mark.parametrize("action", BULK_CASES)
def test_confirming_a_bulk_action_changes_each_job_as_the_staff_user(client, clock, action):
    build, to_state, kind, build_illegal = BULK_CASES[action]
    olga = operator()
    client.force_login(olga)
    touched = [build(), build()]
    skipped = build_illegal()
    skipped_state = skipped.state

    response = bulk(client, action, [*touched, skipped], post="yes", reason="bulk fix")

    assert response.status_code == 302
    for job in touched:
        job.refresh_from_db()
        assert job.state == to_state
        assert job.events.get(kind=kind).actor == olga
        entry = LogEntry.objects.get(object_id=str(job.pk))
        assert (entry.user, entry.action_flag) == (olga, CHANGE)
        assert entry.change_message.startswith(operations.ACTION_OPERATIONS[action].label)
    skipped.refresh_from_db()
    assert skipped.state == skipped_state
    assert not LogEntry.objects.filter(object_id=str(skipped.pk)).exists()
    assert any(m.startswith("2 job(s)") for m in messages_of(response))
    assert any("1 job(s) skipped" in m for m in messages_of(response))


def test_a_bulk_action_on_jobs_in_the_wrong_state_changes_nothing(client, clock):
    client.force_login(operator())
    waiting = [make_job(), make_job()]

    response = bulk(client, "retry_jobs", waiting, post="yes")

    assert "0 job(s) retried." in messages_of(response)
    assert not Job.objects.exclude(state=State.PENDING).exists()
    assert not JobEvent.objects.filter(kind=Kind.RETRIED).exists()
    assert not LogEntry.objects.exists()


def test_a_bulk_action_over_the_limit_is_refused(client, clock, monkeypatch):
    monkeypatch.setattr(rendering, "MAX_BULK", 2)  # the bound of every bulk action
    client.force_login(operator())
    waiting = [make_job(), make_job(), make_job()]

    response = bulk(client, "cancel_jobs", waiting, post="yes")

    assert any("at most 2 jobs" in m for m in messages_of(response))
    assert not Job.objects.exclude(state=State.PENDING).exists()


def test_bulk_actions_need_the_operate_permission(client, clock):
    client.force_login(grant(staff("viv", operator=True), "view_job"))
    job = make_job()
    response = client.get(reverse(CHANGELIST))
    assert "cancel_jobs" not in response.content.decode()
    bulk(client, "cancel_jobs", [job], post="yes")
    job.refresh_from_db()
    assert job.state == State.PENDING


# --- who may see and do what -----------------------------------------------------------------


@pytest.mark.parametrize("is_logged_in", [True, False])
def test_non_staff_users_are_sent_to_the_login_page(client, is_logged_in):
    if is_logged_in:
        client.force_login(grant(staff("nick", operator=True, is_staff=False), "view_job"))
    job = make_job()
    for url in (reverse(CHANGELIST), change_url(job)):
        response = client.get(url)
        assert response.status_code == 302
        assert response.url.startswith(reverse("admin:login"))


def test_a_tenants_staff_see_only_their_tenants_jobs(client, clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    client.force_login(grant(staff("alice", of=acme), "view_job", "operate_job", "operate_delivery"))
    ours = make_job(tenant=acme)
    theirs = make_job(tenant=globex)

    response = client.get(reverse(CHANGELIST))

    assert rows(response) == [ours.pk]
    assert "Globex" not in response.content.decode()
    assert rows(client.get(reverse(CHANGELIST), {"q": str(theirs.pk)})) == []


def test_another_tenants_job_page_and_actions_are_not_found(client, clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    client.force_login(grant(staff("alice", of=acme), "view_job", "operate_job", "operate_delivery"))
    theirs = make_job(tenant=globex, payload={"secret": "globex-data"})

    page = client.get(change_url(theirs), follow=True)
    assert "globex-data" not in page.content.decode()
    assert any("doesn’t exist" in m for m in messages_of(page))
    assert client.post(operation_url(theirs, "cancel")).status_code == 404
    bulk(client, "cancel_jobs", [theirs], post="yes")
    theirs.refresh_from_db()
    assert theirs.state == State.PENDING


def test_a_platform_operator_sees_every_tenant(client, clock):
    client.force_login(operator())
    jobs_ = [make_job(tenant=tenant("Acme")), make_job(tenant=tenant("Globex")), make_job()]
    response = client.get(reverse(CHANGELIST))
    assert sorted(rows(response)) == sorted(job.pk for job in jobs_)

    acme = tenant("Acme")
    response = client.get(reverse(CHANGELIST), {"tenant__id__exact": acme.pk})
    assert rows(response) == [jobs_[0].pk]


def test_jobs_cannot_be_added_or_deleted_by_anyone(client, admin_client, clock):
    """Deleting a job erases the history an audit needs: operators cancel, retention
    prunes. Not even a superuser gets a Delete button or the delete page."""
    job = make_job()
    olga = grant(operator(), "add_job", "delete_job")
    client.force_login(olga)
    assert client.get(reverse("admin:jobs_job_add")).status_code == 403
    assert client.get(reverse("admin:jobs_job_delete", args=[job.pk])).status_code == 403
    assert admin_client.get(reverse("admin:jobs_job_delete", args=[job.pk])).status_code == 403
    page = admin_client.get(reverse("admin:jobs_job_change", args=[job.pk]))
    assert page.status_code == 200
    assert reverse("admin:jobs_job_delete", args=[job.pk]) not in page.content.decode()


def test_workers_are_shown_to_platform_operators_only(client, clock):
    Worker.objects.create(
        name="w-old",
        hostname="h",
        pid=1,
        started_at=clock.now(),
        last_seen_at=clock.now() - timedelta(minutes=5),
    )
    Worker.objects.create(
        name="w-new",
        hostname="h",
        pid=2,
        started_at=clock.now(),
        last_seen_at=clock.now(),
        queues=["reports"],
    )
    client.force_login(operator())
    response = client.get(reverse("admin:jobs_worker_changelist"))
    alive = {w.name: response.context["cl"].model_admin.alive(w) for w in response.context["cl"].result_list}
    assert alive == {"w-new": True, "w-old": False}
    assert "reports" in response.content.decode()

    client.force_login(grant(staff("alice", of=tenant("Acme")), "view_worker"))
    assert client.get(reverse("admin:jobs_worker_changelist")).status_code == 403


# --- events ----------------------------------------------------------------------------------


def test_an_event_page_lists_its_deliveries(admin_client, clock):
    event = jobs.publish("OrderPlaced", {"order": 7})
    deliveries = list(event.deliveries.select_related("job"))

    listing = admin_client.get(reverse("admin:jobs_event_changelist"))
    assert [e.delivery_count for e in listing.context["cl"].result_list] == [2]

    page = admin_client.get(reverse("admin:jobs_event_change", args=[event.pk])).content.decode()
    assert "tests.on_order_placed" in page and "tests.audit_order" in page
    for delivery in deliveries:
        assert change_url(delivery.job) in page
    assert "&quot;order&quot;: 7" in page


def test_a_tenants_staff_see_only_their_tenants_events(client, clock):
    acme = tenant("Acme")
    client.force_login(grant(staff("alice", of=acme), "view_event"))
    ours = jobs.publish("OrderPlaced", {}, tenant=acme)
    jobs.publish("OrderPlaced", {}, tenant=tenant("Globex"))
    response = client.get(reverse("admin:jobs_event_changelist"))
    assert [e.pk for e in response.context["cl"].result_list] == [ours.pk]


# --- staying fast on a big table -----------------------------------------------------------


def _changelist_queries(client: Any, **params: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(reverse(CHANGELIST), params).status_code == 200
    return [query["sql"] for query in captured.captured_queries]


def _fill(count: int) -> None:
    tenants = [tenant("Acme"), tenant("Globex")]
    for n in range(count):
        job = make_job("tests.noop", {"n": n}, tenant=tenants[n % 2])
        JobEvent.objects.create(job=job, at=job.created_at, kind=Kind.PROGRESS)


def test_the_job_list_issues_a_bounded_number_of_queries(client, clock, django_assert_max_num_queries):
    client.force_login(operator())
    _fill(5)
    few = len(_changelist_queries(client))
    _fill(45)
    running()
    failed()
    with django_assert_max_num_queries(few):
        response = client.get(reverse(CHANGELIST))
    assert len(rows(response)) == 50
    assert few <= 12


@pytest.mark.parametrize(
    "params",
    [{}, {"state__exact": "pending"}, {"q": "tests.noop"}, {"failed_within": "1h"}, {"rescued": "yes"}],
)
def test_the_job_list_never_counts_or_deduplicates_the_whole_table(client, clock, params):
    client.force_login(operator())
    _fill(3)
    queries = _changelist_queries(client, **params)
    counts = [sql for sql in queries if "COUNT(" in sql.upper() and "jobs_job" in sql]
    assert counts, "expected the paginator's capped count"
    assert all("LIMIT" in sql.upper() for sql in counts), counts
    assert not any("DISTINCT" in sql.upper() for sql in queries if "jobs_job" in sql)


def test_a_long_filtered_list_shows_its_count_is_capped(admin_client, clock, monkeypatch):
    monkeypatch.setattr(CappedCountPaginator, "cap", 10)
    for _ in range(12):
        make_job(tenant=tenant("Acme"))

    response = admin_client.get(reverse(CHANGELIST), {"state__exact": "pending"})

    assert response.context["cl"].result_count == 10
    assert "more than 10" in response.content.decode()


def test_a_long_unfiltered_list_shows_postgres_estimate(admin_client, clock, monkeypatch):
    monkeypatch.setattr(CappedCountPaginator, "cap", 10)
    for _ in range(30):
        make_job()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")

    response = admin_client.get(reverse(CHANGELIST))

    assert response.context["cl"].paginator.estimate == 30
    assert "about 30" in response.content.decode()
