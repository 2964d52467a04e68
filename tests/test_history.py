"""One history vocabulary: the five history tables are each a ``jobs.History``, with its
columns under the same names and their defaults in the database, every admin shows them
with ``console.admin.HistoryInline``, and the migration that brought them to it kept
every row (a handoff transition's reason code became its kind, a note its message)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.contrib import admin
from django.core.management import call_command
from django.db import connection, models
from django.db.migrations.executor import MigrationExecutor

import jobs
from console.admin import HistoryInline
from exports import services as exports_services
from exports.models import ExportEvent
from ingest.runs import services as runs_services
from ingest.runs.models import RunAction
from ingest.scraping import services as scraping_services
from ingest.scraping.models import HandoffReason, HandoffTransition, IngestionHandoff
from jobs.models import JobEvent
from market.models import MarketAction, MarketFeed
from tests.support.base import make_job, staff, tenant
from tests.support.exports.builders import mapping
from tests.support.ingest import builders

HISTORIES = [JobEvent, ExportEvent, RunAction, MarketAction, HandoffTransition]
VOCABULARY = {
    "at": models.DateTimeField,
    "kind": models.CharField,
    "from_status": models.CharField,
    "to_status": models.CharField,
    "actor": models.ForeignKey,
    "via": models.CharField,
    "message": models.TextField,
    "detail": models.JSONField,
}
# The last migration of each app before the vocabulary.
BEFORE = [
    ("jobs", "0017_operate_permissions"),
    ("ingest", "0011_operate_permissions"),
    ("market", "0002_operate_permissions"),
    ("exports", "0003_operate_permissions"),
]
AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("model", HISTORIES, ids=lambda model: model.__name__)
@pytest.mark.django_db
def test_every_history_table_speaks_the_one_vocabulary(model):
    assert issubclass(model, jobs.History) and not model._meta.abstract
    assert {name: type(model._meta.get_field(name)) for name in VOCABULARY} == VOCABULARY
    actor = model._meta.get_field("actor")
    assert (
        actor.related_model._meta.label,
        actor.null,
        actor.remote_field.on_delete,
        actor.verbose_name,
    ) == (
        settings.AUTH_USER_MODEL,
        True,
        models.SET_NULL,
        "by",
    )
    assert model().detail == {} and model().via == ""
    # The optional columns' defaults are the database's too, for the writers in SQL.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name, column_default FROM information_schema.columns WHERE table_name = %s",
            [model._meta.db_table],
        )
        defaults = dict(cursor.fetchall())
    assert (defaults["from_status"], defaults["via"], defaults["message"], defaults["detail"]) == (
        "''::character varying",
        "''::character varying",
        "''::text",
        "'{}'::jsonb",
    )


def test_every_admin_shows_a_history_with_the_history_inline():
    """No inline of a history table but ``HistoryInline``'s, and the tables whose parent
    has a page of its own are inlines there (an export job's and an ingest run's are drawn
    inside their snapshot's and run's pages, a delivery's job's on the delivery's: their
    admin tests)."""
    inlines = {
        inline.model: inline
        for model_admin in admin.site._registry.values()
        for inline in model_admin.inlines
        if issubclass(inline.model, jobs.History)
    }
    assert all(issubclass(inline, HistoryInline) for inline in inlines.values())
    assert set(inlines) == {JobEvent, MarketAction, HandoffTransition}


# --- the migration ---------------------------------------------------------------------------


def migrate(*targets: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(list(targets) or executor.loader.graph.leaf_nodes())


def columns(table: str, *names: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(names)} FROM {table} ORDER BY id")  # noqa: S608
        return cursor.fetchall()


@pytest.fixture
def forward_at_the_end():
    """Whatever the test does, the next one finds every app migrated to the end."""
    yield
    call_command("migrate", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_the_vocabulary_migration_keeps_every_row_both_ways(forward_at_the_end):
    acme, alice = tenant("Acme"), staff("alice", of=tenant("Acme"))
    JobEvent.objects.create(
        job=make_job(), at=AT, kind="retried", from_status="failed", to_status="pending", message="fixed"
    )
    exports_services.create_snapshot(mapping(of=acme), user=alice)
    runs_services.start_ingest(builders.source(acme), actor=alice, via="api")
    RunAction.objects.update(message="by hand")
    listings = builders.source(acme, name="listings", kind="scraped_reference", config={})
    scraping_services.sync(listings, "scrape-1", [{"external_id": "a", "payload": {"x": 1}}], actor=alice)
    handoff = IngestionHandoff.objects.get()
    feed = MarketFeed.objects.create(tenant=acme, name="cn", api_url="http://market.test/api", token="t")
    MarketAction.objects.create(
        feed=feed, kind="gap_fill", actor=alice, via="admin", at=AT, detail={"days": 3}
    )
    transitions = list(HandoffTransition.objects.order_by("id").values_list("kind", "message"))
    assert transitions

    migrate(*BEFORE)

    # Each row under its old names.
    assert columns("jobs_jobevent", "kind", "from_state", "to_state", "message")[-1] == (
        "retried",
        "failed",
        "pending",
        "fixed",
    )
    assert columns("ingest_runaction", "kind", "via", "note") == [("started", "api", "by hand")]
    assert columns("ingestion_handoff_transitions", "reason_code", "note") == transitions
    assert columns("ingest_marketaction", "action", "via") == [("gap_fill", "admin")]
    assert {"via", "detail"}.isdisjoint(
        column.name
        for column in connection.introspection.get_table_description(
            connection.cursor(), "exports_exportevent"
        )
    )
    # A transition written the old way, as a release before this one wrote them.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ingestion_handoff_transitions "
            "(handoff_id, at, from_status, to_status, reason_code, note, actor_id) "
            "VALUES (%s, %s, 'failed', 'queued', %s, 'old release', NULL)",
            [handoff.pk, AT, HandoffReason.RETRIED_BY_OPERATOR],
        )

    migrate()

    old = HandoffTransition.objects.latest("id")
    assert (old.kind, old.message, old.from_status, old.to_status, old.via, old.detail) == (
        HandoffReason.RETRIED_BY_OPERATOR,
        "old release",
        "failed",
        "queued",
        "",
        {},
    )
    assert list(
        HandoffTransition.objects.exclude(pk=old.pk).order_by("id").values_list("kind", "message")
    ) == (transitions)
    event = JobEvent.objects.get(kind="retried")
    assert (event.from_status, event.to_status, event.message, event.via, event.detail) == (
        "failed",
        "pending",
        "fixed",
        "",
        {},
    )
    action = RunAction.objects.get()
    assert (action.kind, action.via, action.message, action.from_status, action.to_status) == (
        "started",
        "api",
        "by hand",
        "",
        "",
    )
    market = MarketAction.objects.get()
    assert (market.kind, market.actor, market.via, market.detail, market.message) == (
        "gap_fill",
        alice,
        "admin",
        {"days": 3},
        "",
    )
    exported = ExportEvent.objects.all()
    assert exported and all(
        (e.kind, e.actor, e.via, e.detail) == ("created", alice, "", {}) for e in exported
    )
