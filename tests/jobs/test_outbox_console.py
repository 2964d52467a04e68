"""The outbox console: each subscriber's lag, and quarantine, release and replay of a
delivery — through the services (``jobs.outbox``), the ``outbox`` command and the admin,
each recorded with the actor and the reason; a quarantined delivery's job is refused by the
engine itself, and a tenant's staff see and touch only their tenant's deliveries."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs import engine, outbox, retention
from jobs.errors import IllegalTransition, InvalidArgument, LeaseLost
from jobs.models import Delivery, Job, JobEvent
from jobs.worker import run_until_idle
from tests.support.base import as_user, granted, staff, tenant
from tests.support.history import history_rows
from tests.support.jobs.builders import (
    AUDIT,
    ON_ORDER,
    delivered,
    delivery_of,
    failed_delivery,
    failing,
    grant,
    messages_of,
    operator,
    run_command,
    undelivered,
)

pytestmark = pytest.mark.django_db

State = Job.State
Kind = JobEvent.Kind
Status = outbox.Status
CONSOLE = "admin:jobs_delivery_changelist"


# --- builders ----------------------------------------------------------------------------


def fresh(delivery: Delivery) -> Delivery:
    return delivery_of(delivery.event)


# --- the services ------------------------------------------------------------------------


def test_lag_counts_each_subscribers_undelivered_failing_failed_and_quarantined(clock):
    first = failing()
    failed_delivery()
    outbox.quarantine(failing(), None, "poison payload")
    clock.advance(30)
    undelivered()
    clock.advance(150)

    lags = {lag.subscriber: lag for lag in outbox.lag()}

    mine = lags[ON_ORDER]
    assert (mine.undelivered, mine.failing, mine.failed, mine.quarantined) == (2, 1, 1, 1)
    assert mine.oldest == first.event.created_at
    assert outbox.age(mine.oldest_seconds(clock.now())) == "3 min"
    # AUDIT delivered three and has one waiting: the last event's.
    assert (lags[AUDIT].undelivered, lags[AUDIT].failed, lags[AUDIT].quarantined) == (1, 0, 0)


def test_lag_is_two_group_bys_that_never_read_delivered_deliveries(clock, django_assert_num_queries):
    failing()
    with CaptureQueriesContext(connection) as captured, django_assert_num_queries(2):
        outbox.lag()
    grouped, held = (query["sql"] for query in captured.captured_queries)
    assert "GROUP BY" in grouped and "'succeeded'" not in grouped
    assert "IN ('pending', 'running', 'failed')" in grouped
    assert '"quarantined_at" IS NOT NULL' in held


def test_the_status_of_each_delivery(clock):
    assert outbox.status_of(undelivered()) == Status.UNDELIVERED
    assert outbox.status_of(failing()) == Status.FAILING
    assert outbox.status_of(failed_delivery()) == Status.FAILED
    assert outbox.status_of(delivered()) == Status.DELIVERED
    held = outbox.quarantine(failing(), None, "poison")
    assert outbox.status_of(held) == Status.QUARANTINED
    for status in Status.values:
        found = {
            outbox.status_of(d) for d in Delivery.objects.filter(outbox.where(status)).select_related("job")
        }
        assert found <= (
            {Status.UNDELIVERED, Status.FAILING} if status == Status.UNDELIVERED else {status}
        ), status


def test_quarantine_cancels_an_undelivered_delivery_recording_who_and_why(clock):
    alice = staff("alice")
    delivery = failing()

    held = outbox.quarantine(delivery, alice, "  poison payload: order 0 is malformed ")

    assert held.job.state == State.CANCELLED
    assert (held.quarantined_at, held.quarantined_by, held.quarantine_reason) == (
        clock.now(),
        alice,
        "poison payload: order 0 is malformed",
    )
    event = held.job.events.get(kind=Kind.CANCELLED)
    assert event.actor == alice
    assert event.message == "quarantined: poison payload: order 0 is malformed"


def test_quarantining_a_running_delivery_fences_out_its_worker(clock):
    delivery = undelivered()
    batch = engine.claim("w1", limit=10)
    job = next(job for job in batch.jobs if job.pk == delivery.job_id)
    engine.start([job], batch.token)

    outbox.quarantine(delivery, None, "it loops")

    with pytest.raises(LeaseLost):
        engine.complete(job, batch.token, worker="w1")
    assert fresh(delivery).job.state == State.CANCELLED


def test_quarantining_a_failed_delivery_leaves_its_state_and_records_the_action(clock):
    alice = staff("alice")
    delivery = failed_delivery()

    outbox.quarantine(delivery, alice, "poison")

    job = fresh(delivery).job
    assert job.state == State.FAILED
    event = job.events.get(kind=Kind.QUARANTINED)
    assert (event.actor, event.message, event.from_status, event.to_status) == (
        alice,
        "quarantined: poison",
        State.FAILED,
        State.FAILED,
    )


@pytest.mark.parametrize("action", ["retry", "recover", "run_now", "replay"])
def test_the_engine_refuses_to_run_a_quarantined_deliverys_job_again(clock, action):
    held = outbox.quarantine(failing(), None, "poison")
    if action in ("recover", "run_now"):  # states they need, as if someone forced one
        Job.objects.filter(pk=held.job_id).update(state=State.PENDING, finished_at=None)

    with pytest.raises(IllegalTransition, match="release the delivery first"):
        getattr(engine, action)(held.job, actor=None, reason="try anyway")

    assert not held.job.events.filter(
        kind__in=[Kind.RETRIED, Kind.RECOVERED, Kind.RUN_NOW, Kind.REPLAYED]
    ).exists()


def test_release_clears_the_quarantine_and_retries_the_job(clock):
    alice = staff("alice")
    held = outbox.quarantine(failing(), alice, "poison")

    released = outbox.release(held, alice, "fixed the subscriber")

    assert released.quarantined_at is None and released.quarantined_by is None
    assert released.quarantine_reason == ""
    assert (released.job.state, released.job.attempts) == (State.PENDING, 0)
    event = released.job.events.get(kind=Kind.RETRIED)
    assert (event.actor, event.message) == (alice, "released from quarantine: fixed the subscriber")


def test_replay_delivers_an_event_again_and_the_history_keeps_the_earlier_outcome(clock):
    alice = staff("alice")
    delivery = delivered()

    replayed = outbox.replay(delivery, alice, "the subscriber lost its copy")

    assert replayed.job.state == State.PENDING
    kinds = list(replayed.job.events.values_list("kind", flat=True))
    assert kinds[-2:] == [Kind.SUCCEEDED, Kind.REPLAYED]
    event = replayed.job.events.get(kind=Kind.REPLAYED)
    assert (event.actor, event.message, event.from_status) == (
        alice,
        "replayed: the subscriber lost its copy",
        State.SUCCEEDED,
    )
    run_until_idle()
    assert fresh(delivery).job.state == State.SUCCEEDED


@pytest.mark.parametrize(
    "action, build, why",
    [
        ("replay", undelivered, "is undelivered; only a finished delivery"),
        ("replay", failing, "is failing; only a finished delivery"),
        ("release", failed_delivery, "is failed; only a quarantined delivery can be released"),
        ("quarantine", delivered, "is delivered; only a delivery that is not delivered"),
    ],
)
def test_illegal_actions_are_refused_naming_why(clock, action, build, why):
    delivery = build()
    before = list(delivery.job.events.values_list("id", flat=True))

    with pytest.raises(IllegalTransition, match=why):
        getattr(outbox, action)(delivery, None, "because")

    assert list(delivery.job.events.values_list("id", flat=True)) == before


def test_replaying_a_quarantined_delivery_says_to_release_it(clock):
    held = outbox.quarantine(failed_delivery(), None, "poison")
    with pytest.raises(IllegalTransition, match="release it instead"):
        outbox.replay(held, None, "again")


def test_every_action_needs_a_reason(clock):
    with pytest.raises(InvalidArgument, match="needs a reason"):
        outbox.quarantine(failing(), None, "   ")


def test_the_database_refuses_a_quarantine_without_a_reason(clock):
    delivery = failing()
    with pytest.raises(IntegrityError), transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk).update(quarantined_at=clock.now())


def test_retention_keeps_a_quarantined_delivery_until_it_is_released(clock):
    held = outbox.quarantine(failing(), None, "poison")
    gone = failed_delivery()
    clock.advance(90 * 86_400)

    retention.prune()

    assert Delivery.objects.filter(pk=held.pk).exists()
    assert not Delivery.objects.filter(pk=gone.pk).exists()


# --- the command -------------------------------------------------------------------------


def test_outbox_lag_prints_each_subscribers_figures(clock):
    failing()
    clock.advance(125)
    undelivered()

    out = run_command("outbox", "lag")

    header, *rows = out.splitlines()
    assert header.split() == [
        "subscriber",
        "undelivered",
        "oldest",
        "undelivered",
        "failing",
        "failed",
        "quarantined",
    ]
    mine = next(line for line in rows if line.startswith(ON_ORDER))
    assert mine.split() == [ON_ORDER, "2", "2", "min", "1", "0", "0"]


def test_outbox_commands_quarantine_release_and_replay_as_the_user(clock):
    alice = granted(staff("alice", operator=True), "jobs.operate_delivery")
    delivery = failing()

    out = run_command("outbox", "quarantine", str(delivery.pk), "--reason", "poison", "--user", "alice")
    assert f"Quarantined delivery {delivery.pk}" in out
    assert fresh(delivery).quarantined_by == alice

    run_command("outbox", "release", str(delivery.pk), "--reason", "fixed", "--user", "alice")
    assert fresh(delivery).quarantined_at is None
    Job.objects.filter(pk=delivery.job_id).update(state=State.SUCCEEDED, finished_at=clock.now())

    run_command("outbox", "replay", str(delivery.pk), "--reason", "lost", "--user", "alice")
    replayed = fresh(delivery).job.events.get(kind=Kind.REPLAYED)
    assert (replayed.actor, replayed.message) == (alice, "replayed: lost")


@pytest.mark.parametrize(
    "args, problem",
    [
        (["replay", "999999", "--reason", "x", "--user", "alice"], "no delivery with id 999999"),
        (["replay", "{pk}", "--reason", "x", "--user", "nobody"], "no user named 'nobody'"),
        (["replay", "{pk}", "--reason", "x", "--user", "alice"], "is failing; only a finished"),
        (["release", "{pk}", "--reason", "x", "--user", "alice"], "only a quarantined delivery"),
        (["quarantine", "{pk}", "--reason", " ", "--user", "alice"], "needs a reason"),
    ],
)
def test_outbox_command_errors_name_the_problem(clock, args, problem):
    granted(staff("alice", operator=True), "jobs.operate_delivery")
    delivery = failing()
    with pytest.raises(CommandError, match=problem):
        run_command("outbox", *[arg.format(pk=delivery.pk) for arg in args])


@pytest.mark.parametrize("action", ["quarantine", "release", "replay"])
@pytest.mark.parametrize(
    "build",
    [
        lambda: staff("bob"),  # staff, without the permission
        lambda: granted(staff("bob"), "jobs.operate_job"),  # the jobs', not the deliveries'
        lambda: granted(staff("bob", is_staff=False), "jobs.operate_delivery"),  # not staff
    ],
)
def test_outbox_commands_refuse_a_user_who_may_not_operate_deliveries_and_change_nothing(
    clock, action, build
):
    build()
    delivery = failing()
    before = list(fresh(delivery).job.events.values_list("kind", flat=True))

    with pytest.raises(
        CommandError, match=r"'bob' may not do this: it needs staff granted jobs\.operate_delivery"
    ):
        run_command("outbox", action, str(delivery.pk), "--reason", "x", "--user", "bob")

    after = fresh(delivery)
    assert after.quarantined_at is None and after.job.state == delivery.job.state
    assert list(after.job.events.values_list("kind", flat=True)) == before


def test_a_tenants_staff_act_on_their_tenants_deliveries_only(clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    carl = granted(staff("carl", of=acme), "jobs.operate_delivery")
    mine, theirs = failing(tenant=acme), failing(tenant=globex)

    with pytest.raises(CommandError, match=f"'carl' may not act on delivery {theirs.pk}: it is not their"):
        run_command("outbox", "quarantine", str(theirs.pk), "--reason", "x", "--user", "carl")
    run_command("outbox", "quarantine", str(mine.pk), "--reason", "poison", "--user", "carl")

    assert fresh(theirs).quarantined_at is None
    assert fresh(mine).quarantined_by == carl


# --- the admin -----------------------------------------------------------------------------


def test_the_console_shows_each_subscribers_figures_linked_to_the_filtered_list(client, clock):
    client.force_login(operator())
    failing()
    clock.advance(240)

    response = client.get(reverse(CONSOLE))

    assert response.status_code == 200
    row = next(row for row in response.context["lag"] if row["subscriber"] == ON_ORDER)
    figures = {name: (figure, url) for name, figure, url in row["figures"]}
    assert figures["undelivered"][0] == 1 and figures["failing"][0] == 1
    assert figures["oldest"][0] == "4 min"
    failing_url = figures["failing"][1]
    assert failing_url == f"{reverse(CONSOLE)}?subscriber={ON_ORDER}&status=failing"
    page = response.content.decode()
    assert 'id="outbox-lag"' in page and failing_url.replace("&", "&amp;") in page

    listed = client.get(failing_url)
    assert [d.subscriber for d in listed.context["cl"].result_list] == [ON_ORDER]
    assert "cluster busy" in listed.content.decode()  # the last error's head


@pytest.mark.parametrize("status", Status.values)
def test_the_status_filter_lists_the_deliveries_in_that_status(client, clock, status):
    client.force_login(operator())
    built = {
        Status.FAILING: failing(),
        Status.FAILED: failed_delivery(),
        Status.DELIVERED: delivered(),
        Status.QUARANTINED: outbox.quarantine(failing(), None, "poison"),
        Status.CANCELLED: undelivered(),
    }
    engine.cancel(built[Status.CANCELLED].job)
    built[Status.UNDELIVERED] = undelivered()  # last: the others ran their jobs

    response = client.get(reverse(CONSOLE), {"subscriber": ON_ORDER, "status": status})

    listed = {d.pk for d in response.context["cl"].result_list}
    expected = {built[status].pk}
    if status == Status.UNDELIVERED:
        expected.add(built[Status.FAILING].pk)  # failing is undelivered too
    assert listed == expected


def test_quarantine_from_a_deliverys_page_asks_for_a_reason_then_acts(client, clock):
    olga = operator()
    client.force_login(olga)
    delivery = failing()
    page = client.get(reverse("admin:jobs_delivery_change", args=[delivery.pk])).content.decode()
    url = reverse("admin:jobs_delivery_quarantine", args=[delivery.pk])
    assert f'href="{url}"' in page
    assert reverse("admin:jobs_delivery_replay", args=[delivery.pk]) not in page  # not finished

    asked = client.get(url)
    assert asked.templates[0].name == "admin/jobs/delivery/action_confirmation.html"
    assert "Quarantine 1 delivery" in asked.content.decode()
    assert 'name="reason"' in asked.content.decode()
    assert fresh(delivery).quarantined_at is None  # asking changes nothing

    done = client.post(url, {"post": "yes", "reason": "poison payload"}, follow=True)

    assert f"Delivery {delivery.pk} quarantined." in messages_of(done)
    held = fresh(delivery)
    assert (held.quarantined_by, held.quarantine_reason) == (olga, "poison payload")
    # The delivery's page shows its job's history, the quarantine last, by whom and how.
    last = history_rows(done.content.decode())[-1]
    assert (last["kind"], last["by"], last["via"], last["message"]) == (
        "cancelled",
        olga.get_username(),
        "admin",
        "quarantined: poison payload",
    )
    assert held.job.events.get(kind=Kind.CANCELLED).actor == olga
    entry = LogEntry.objects.get(object_id=str(delivery.pk))
    assert (entry.user, entry.change_message) == (olga, "Quarantine via the admin: poison payload")


def test_bulk_replay_previews_then_replays_as_the_staff_user(client, clock):
    olga = operator()
    client.force_login(olga)
    done_ = delivered()
    waiting = undelivered()
    selected = {"action": "replay_deliveries", "_selected_action": [done_.pk, waiting.pk]}

    preview = client.post(reverse(CONSOLE), selected)
    assert [d.pk for d in preview.context["touch"]] == [done_.pk]
    assert [d.pk for d in preview.context["skip"]] == [waiting.pk]
    assert "which needs a delivery that is delivered or failed or cancelled" in (preview.content.decode())

    result = client.post(reverse(CONSOLE), {**selected, "post": "yes", "reason": "lost copy"}, follow=True)

    assert "1 delivery replayed." in messages_of(result)
    assert any("1 skipped: replay needs a delivery that is" in m for m in messages_of(result))
    event = fresh(done_).job.events.get(kind=Kind.REPLAYED)
    assert (event.actor, event.message) == (olga, "replayed: lost copy")
    assert fresh(waiting).job.events.filter(kind=Kind.REPLAYED).count() == 0
    assert LogEntry.objects.filter(user=olga, object_id=str(done_.pk)).exists()


def test_a_bulk_action_without_a_reason_changes_nothing(client, clock):
    client.force_login(operator())
    delivery = failing()
    result = client.post(
        reverse(CONSOLE),
        {"action": "quarantine_deliveries", "post": "yes", "_selected_action": [delivery.pk], "reason": " "},
        follow=True,
    )
    assert "Quarantine needs a reason; nothing was changed." in messages_of(result)
    assert fresh(delivery).quarantined_at is None


@pytest.mark.parametrize(
    "action, build, why",
    [
        ("release", failing, "is failing; only a quarantined delivery can be released"),
        ("replay", undelivered, "is undelivered; only a finished delivery"),
    ],
)
def test_an_illegal_action_from_a_deliverys_page_says_why(client, clock, action, build, why):
    client.force_login(operator())
    delivery = build()
    url = reverse(f"admin:jobs_delivery_{action}", args=[delivery.pk])

    asked = client.get(url)
    assert asked.status_code == 200 and asked.context["touch"] == []
    assert "Skipped: 1 delivery" in asked.content.decode()

    result = client.post(url, {"post": "yes", "reason": "try"}, follow=True)
    assert result.status_code == 200
    assert any(why in m for m in messages_of(result)), messages_of(result)


def test_the_job_page_refuses_to_retry_a_quarantined_deliverys_job(client, clock):
    client.force_login(operator())
    held = outbox.quarantine(failed_delivery(), None, "poison")

    result = client.post(reverse("admin:jobs_job_retry", args=[held.job_id]), follow=True)

    assert any("release the delivery first" in m for m in messages_of(result))
    assert fresh(held).job.state == State.FAILED


def test_the_api_refuses_to_retry_a_quarantined_deliverys_job(clock):
    held = outbox.quarantine(failed_delivery(), None, "poison")
    response = as_user(operator()).post(f"/api/jobs/{held.job_id}/retry/")
    assert response.status_code == 409
    assert "release the delivery first" in response.content.decode()


def test_a_tenants_staff_neither_see_nor_touch_another_tenants_deliveries(client, clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    ours = failing(tenant=acme)
    theirs = failing(tenant=globex)
    client.force_login(operator("alice", of=acme))

    console = client.get(reverse(CONSOLE))
    assert {d.event.tenant_id for d in console.context["cl"].result_list} == {acme.pk}
    mine = next(row for row in console.context["lag"] if row["subscriber"] == ON_ORDER)
    assert dict((name, figure) for name, figure, _ in mine["figures"])["failing"] == 1

    assert client.get(reverse("admin:jobs_delivery_change", args=[theirs.pk])).status_code == 302
    for action in ("quarantine", "release", "replay"):
        url = reverse(f"admin:jobs_delivery_{action}", args=[theirs.pk])
        assert client.get(url).status_code == 404
        assert client.post(url, {"post": "yes", "reason": "x"}).status_code == 404
    client.post(
        reverse(CONSOLE),
        {"action": "quarantine_deliveries", "post": "yes", "reason": "x", "_selected_action": [theirs.pk]},
    )
    assert fresh(theirs).quarantined_at is None and fresh(theirs).job.state == State.PENDING
    assert fresh(ours).quarantined_at is None


def test_deliveries_cannot_be_added_changed_or_deleted(admin_client, clock):
    delivery = failing()
    assert admin_client.get(reverse("admin:jobs_delivery_add")).status_code == 403
    assert admin_client.get(reverse("admin:jobs_delivery_delete", args=[delivery.pk])).status_code == 403
    page = admin_client.get(reverse("admin:jobs_delivery_change", args=[delivery.pk]))
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    actions = page.context["adminform"].model_admin.get_actions(page.wsgi_request)
    assert "delete_selected" not in actions


def test_staff_who_may_not_operate_jobs_get_no_actions(client, clock):
    client.force_login(grant(staff("vera", operator=True), "view_delivery"))
    delivery = failing()
    page = client.get(reverse("admin:jobs_delivery_change", args=[delivery.pk])).content.decode()
    assert 'id="delivery-operations"' not in page
    url = reverse("admin:jobs_delivery_quarantine", args=[delivery.pk])
    assert client.post(url, {"post": "yes", "reason": "x"}).status_code == 403
