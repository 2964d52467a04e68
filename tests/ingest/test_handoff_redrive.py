"""Redriving failed handoffs by filter: the service the API, the admin and the command
share, bounded per transaction, resumable without queueing a handoff twice, and audited
with who asked, through which door, the filter and the count."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from ingest.runs.models import IngestSource
from ingest.scraping import services
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff
from jobs.models import Event
from tests.support.base import as_user, granted, staff
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db

HANDOFFS = "/admin/ingest/ingestionhandoff/"


@pytest.fixture
def listings(acme) -> IngestSource:
    return builders.source(acme, name="listings", kind="scraped_reference", config={})


@pytest.fixture
def alice(acme) -> User:
    return granted(staff("alice", of=acme), "ingest.operate_ingestionhandoff")


def refused_sync(source: IngestSource, scrape_run: str, *external_ids: str, price: int = 1) -> None:
    """Handoffs whose ingestion could not be queued (the source was disabled), with the
    source enabled again, as an operator finds them."""
    IngestSource.objects.filter(pk=source.pk).update(enabled=False)
    source.refresh_from_db()
    services.sync(source, scrape_run, [{"external_id": e, "payload": {"price": price}} for e in external_ids])
    IngestSource.objects.filter(pk=source.pk).update(enabled=True)
    source.refresh_from_db()


def failed() -> list[int]:
    return sorted(IngestionHandoff.objects.filter(status=HandoffStatus.FAILED).values_list("pk", flat=True))


def queued() -> list[int]:
    return sorted(IngestionHandoff.objects.filter(status=HandoffStatus.QUEUED).values_list("pk", flat=True))


def age(*handoffs: int, by: timedelta) -> None:
    """Move the handoffs' ``updated_at`` back (past the trigger that keeps it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE ingestion_handoffs DISABLE TRIGGER trg_update_ingestion_handoff_timestamp"
        )
        IngestionHandoff.objects.filter(pk__in=handoffs).update(updated_at=services.database_now() - by)
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no trigger event pending for the ALTER
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute("ALTER TABLE ingestion_handoffs ENABLE TRIGGER trg_update_ingestion_handoff_timestamp")


# --- the service ------------------------------------------------------------------------------


def test_a_later_sync_of_the_same_payload_leaves_a_failed_handoff_failed_and_a_redrive_queues_it(
    listings, alice
):
    refused_sync(listings, "scrape-1", "a")
    [handoff] = failed()

    again = services.sync(listings, "scrape-2", [{"external_id": "a", "payload": {"price": 1}}])

    assert (again.handoffs.failed, again.handoffs.queued) == (1, 0)
    assert failed() == [handoff]
    done = services.redrive(services.RedriveFilter(listings), actor=alice, via="api", note="source back")
    assert (done.count, done.queued, done.waiting) == (1, 1, 0)
    assert queued() == [handoff]
    moved = IngestionHandoff.objects.get(pk=handoff)
    assert moved.job_id is not None and moved.last_error == "" and moved.attempts == 0


def test_a_redrive_takes_what_its_filter_names_only(listings, alice):
    refused_sync(listings, "scrape-1", "a", "b")
    refused_sync(listings, "scrape-2", "c")
    by_id = dict(IngestionHandoff.objects.values_list("reference__external_id", "pk"))
    age(by_id["a"], by=timedelta(hours=3))

    of_run = services.preview_redrive(services.RedriveFilter(listings, scrape_run_id="scrape-2"))
    old = services.preview_redrive(services.RedriveFilter(listings, older_than=timedelta(hours=2)))
    exhausted = services.preview_redrive(
        services.RedriveFilter(listings, reasons=(HandoffReason.RETRY_EXHAUSTED,))
    )
    refused = services.preview_redrive(
        services.RedriveFilter(listings, reasons=(HandoffReason.QUEUE_REFUSED,))
    )

    assert [h.pk for h in of_run.sample] == [by_id["c"]]
    assert (old.count, [h.pk for h in old.sample]) == (1, [by_id["a"]])
    assert exhausted.count == 0
    long_ago = services.database_now() - timedelta(days=1)
    both = services.RedriveFilter(listings, failed_before=long_ago, older_than=timedelta(hours=2))
    assert services.preview_redrive(both).count == 0  # both bounds hold
    assert refused.count == 3
    assert failed() == sorted(by_id.values())  # previews change nothing
    with pytest.raises(services.RedriveRefused):
        services.RedriveFilter(listings, reasons=("nonsense",))


def test_a_failed_handoff_of_an_older_payload_is_not_redriven(listings, alice):
    refused_sync(listings, "scrape-1", "a", price=1)
    [old] = failed()
    refused_sync(listings, "scrape-2", "a", price=2)
    newest = IngestionHandoff.objects.exclude(pk=old).get().pk

    done = services.redrive(services.RedriveFilter(listings), actor=alice, via="api")

    assert done.count == 1
    assert queued() == [newest] and failed() == [old]


def test_a_redrive_runs_in_bounded_transactions_each_audited(listings, alice):
    refused_sync(listings, "scrape-1", *"abcde")

    done = services.redrive(
        services.RedriveFilter(listings, scrape_run_id="scrape-1"),
        actor=alice,
        via="command",
        note="why",
        batch=2,
    )

    assert (done.count, done.batches, done.remaining) == (5, 3, 0)
    events = Event.objects.filter(name="HandoffsRedriven").order_by("id")
    assert [e.payload["count"] for e in events] == [2, 2, 1]
    assert {e.created_by_id for e in events} == {alice.pk} and {e.tenant_id for e in events} == {
        listings.tenant_id
    }
    first = events[0].payload
    assert (first["via"], first["note"], first["filter"]["scrape_run_id"]) == ("command", "why", "scrape-1")
    assert first["filter"]["source"] == "listings" and first["filter"]["status"] == "failed"
    for handoff in IngestionHandoff.objects.all():
        step = handoff.transitions.get(kind=HandoffReason.RETRIED_BY_OPERATOR)
        assert (step.actor, step.via, step.message, step.from_status) == (alice, "command", "why", "failed")
        assert step.detail["redrive"]["scrape_run_id"] == "scrape-1"


def test_an_interrupted_redrive_resumes_where_it_stopped_and_never_queues_a_handoff_twice(listings, alice):
    refused_sync(listings, "scrape-1", *"abcde")
    first = services.redrive(services.RedriveFilter(listings), actor=alice, via="api", batch=2, max_batches=1)
    assert (first.count, first.remaining) == (2, 3)
    # What the first batch queued fails again before the redrive is resumed.
    again = queued()
    IngestionHandoff.objects.filter(pk__in=again).update(
        status=HandoffStatus.FAILED, reason_code=HandoffReason.INGESTION_FAILED, job_id=None
    )

    rest = services.redrive(
        services.RedriveFilter(listings, failed_before=first.failed_before), actor=alice, via="api", batch=2
    )

    assert (rest.count, rest.remaining) == (3, 0)
    assert failed() == again  # not queued a second time by the same redrive
    for handoff in IngestionHandoff.objects.all():
        assert handoff.transitions.filter(kind=HandoffReason.RETRIED_BY_OPERATOR).count() == 1


# --- the API ----------------------------------------------------------------------------------


def redrive(client, body: dict, source: str = "listings", **query):
    suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
    return client.post(f"/scraping/{source}/handoffs/redrive{suffix}", body, format="json")


def test_the_api_previews_a_redrive_then_runs_it_as_the_caller(listings, alice):
    refused_sync(listings, "scrape-1", "a", "b")
    client = as_user(alice)

    preview = redrive(client, {"dry_run": True, "reason": ["queue_refused"]})

    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert (body["dry_run"], body["count"], body["remaining"]) == (True, 2, 2)
    assert [h["external_id"] for h in body["sample"]] == ["a", "b"]
    assert len(failed()) == 2
    done = redrive(
        client, {"reason": ["queue_refused"], "note": "back up", "failed_before": body["failed_before"]}
    )
    assert done.status_code == 200, done.content
    assert (done.json()["count"], done.json()["queued"], done.json()["remaining"]) == (2, 2, 0)
    assert failed() == []
    event = Event.objects.get(name="HandoffsRedriven")
    assert (event.created_by, event.payload["via"], event.payload["count"]) == (alice, "api", 2)
    assert redrive(client, {}).json()["count"] == 0  # nothing left: nothing twice


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"status": "queued"}, "status"),
        ({"reason": ["nonsense"]}, "reason"),
        ({"older_than": -1}, "older_than"),
        ({"dry": True}, "dry"),
        ({"scrape_run_id": ""}, "scrape_run_id"),
    ],
)
def test_a_bad_redrive_is_a_400_naming_it_and_changes_nothing(listings, alice, body, named):
    refused_sync(listings, "scrape-1", "a")

    answer = redrive(as_user(alice), body)

    assert answer.status_code == 400 and named in answer.json(), answer.content
    assert len(failed()) == 1


def test_redriving_needs_the_operate_permission_and_the_sources_tenant(listings, acme, globex):
    refused_sync(listings, "scrape-1", "a")
    member = as_user(staff("bob", of=acme, is_staff=False))
    viewer = as_user(staff("vera", of=acme))
    stranger = as_user(granted(staff("gina", of=globex), "ingest.operate_ingestionhandoff"))

    assert redrive(member, {}).status_code == 403
    assert redrive(viewer, {}).status_code == 403
    assert redrive(stranger, {}).status_code == 404
    assert redrive(stranger, {}, tenant="acme").status_code == 404
    assert len(failed()) == 1


# --- the command ------------------------------------------------------------------------------


def test_the_command_previews_and_redrives_as_its_user(listings, alice):
    refused_sync(listings, "scrape-1", "a", "b")
    out = io.StringIO()

    call_command("handoff_redrive", "--source", "listings", "--dry-run", stdout=out)

    assert "2 failed handoff(s) of listings (acme) would be queued again" in out.getvalue()
    assert len(failed()) == 2
    out = io.StringIO()
    call_command(
        "handoff_redrive",
        "--source=listings",
        "--status=failed",
        "--reason=queue_refused",
        "--older-than=0s",
        "--user=alice",
        "--note=source back",
        stdout=out,
    )
    assert "2 handoff(s) of listings (acme) queued again" in out.getvalue()
    assert failed() == []
    step = IngestionHandoff.objects.first().transitions.get(kind=HandoffReason.RETRIED_BY_OPERATOR)
    assert (step.actor, step.via, step.message) == (alice, "command", "source back")


@pytest.mark.parametrize(
    ("older_than", "why"),
    [("2 days", "give a number and a unit"), ("999999999d", "at most 3660d")],
)
def test_the_command_names_a_bad_age_and_changes_nothing(listings, older_than, why):
    refused_sync(listings, "scrape-1", "a")

    with pytest.raises(CommandError, match=why):
        call_command("handoff_redrive", "--source", "listings", f"--older-than={older_than}")
    assert len(failed()) == 1


# --- the admin --------------------------------------------------------------------------------


def browser(user: User) -> Client:
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="ingest"))
    client = Client()
    client.force_login(User.objects.get(pk=user.pk))
    return client


def test_the_admin_previews_a_redrive_of_the_selection_and_runs_it_with_a_reason(listings, alice):
    refused_sync(listings, "scrape-1", "a", "b")
    services.sync(listings, "scrape-2", [{"external_id": "c", "payload": {"x": 1}}])  # queued: left alone
    client = browser(alice)
    everything = {"action": "redrive_handoffs", "select_across": "1", "_selected_action": failed()[:1]}

    preview = client.post(HANDOFFS, everything)

    html = preview.content.decode()
    assert preview.status_code == 200
    assert "2 failed handoffs will be queued again" in html and "1 selected handoff will be left" in html
    assert len(failed()) == 2
    bound = preview.context["failed_before"]
    nothing = client.post(HANDOFFS, {**everything, "post": "yes", "failed_before": bound}, follow=True)
    assert "A redrive needs a reason; nothing was changed." in nothing.content.decode()
    assert len(failed()) == 2

    done = client.post(
        HANDOFFS, {**everything, "post": "yes", "failed_before": bound, "reason": "source back"}, follow=True
    )

    assert "2 handoff(s) queued again, in 1 transaction(s)." in done.content.decode()
    assert failed() == []
    step = IngestionHandoff.objects.filter(reference__external_id="a").get().transitions.last()
    assert step.kind == HandoffReason.INGESTION_JOB_QUEUED and (step.actor, step.via) == (alice, "admin")
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_id) == (alice, str(listings.pk))
    assert entry.change_message == "Redrive via the admin (2 handoff(s)): source back"
