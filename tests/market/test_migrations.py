"""Market data moved from the ingest app to an app of its own, its tables and rows where
they were: rolling ingest back (to before the handoffs) leaves every market table and
row alone, a new database gets the tables from ingest's 0005, and the models' content
types, with their permissions and the admin's log entries, follow the models."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from market.models import (
    DailyBar,
    DailyBatch,
    Dataset,
    DayLoad,
    Instrument,
    LoadTrigger,
    MarketAction,
    MarketFeed,
    SourceFreshness,
    TradingDay,
)
from tests.support.base import staff

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_HANDOFFS = "0002_scrape_references"
AT = datetime(2026, 11, 2, 11, 0, tzinfo=UTC)
MONDAY = date(2026, 11, 2)
MODELS = [MarketFeed, TradingDay, Instrument, DailyBar, SourceFreshness, DailyBatch, DayLoad, MarketAction]
TABLES = [model._meta.db_table for model in MODELS]


@pytest.fixture
def forward_at_the_end():
    """Whatever the test does, the next one finds every app migrated to the end."""
    yield
    call_command("migrate", verbosity=0)


def market_data(tenant) -> MarketFeed:
    """A feed with a row in each market table."""
    feed = MarketFeed.objects.create(
        tenant=tenant, name="cn-equities", api_url="http://127.0.0.1:9/", token="t"
    )
    TradingDay.objects.create(feed=feed, exchange="SSE", cal_date=MONDAY, is_open=True)
    Instrument.objects.create(feed=feed, ts_code="600000.SH", list_status="L")
    for code in ("600000.SH", "000001.SZ"):
        DailyBar.objects.create(feed=feed, ts_code=code, trade_date=MONDAY, open=1, high=2, low=1, close=2)
    SourceFreshness.objects.create(feed=feed, dataset=Dataset.DAILY, last_success=AT, rows_today=2)
    batch = DailyBatch.objects.create(
        feed=feed, market_date=MONDAY, status="running", due_at=AT, started_at=AT
    )
    DayLoad.objects.create(
        feed=feed, trade_date=MONDAY, trigger=LoadTrigger.SCHEDULE, batch=batch, created_at=AT
    )
    MarketAction.objects.create(feed=feed, kind="gap_fill", via="admin", at=AT)
    return feed


def rows() -> dict[str, int | None]:
    """Each market table's row count, read with SQL; None for a table that is not there."""
    counts: dict[str, int | None] = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
            if not cursor.fetchone()[0]:
                counts[table] = None
                continue
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cursor.fetchone()[0]
    return counts


def applied(app: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM django_migrations WHERE app = %s", [app])
        return {name for (name,) in cursor.fetchall()}


def undone_by(app: str, target: str | None) -> list[tuple[str, str]]:
    """The migrations ``migrate app target`` would unapply, in order."""
    executor = MigrationExecutor(connection)
    return [(m.app_label, m.name) for m, backwards in executor.migration_plan([(app, target)]) if backwards]


def executor_migrate(*targets: tuple[str, str | None]) -> None:
    """Migrate as ``manage.py migrate`` does, without its post_migrate signal (which makes
    the content types and permissions missing at the end)."""
    executor = MigrationExecutor(connection)
    executor.migrate(list(targets) or executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()


def market_content_types() -> set[tuple[str, str]]:
    names = [model._meta.model_name for model in MODELS]
    return set(ContentType.objects.filter(model__in=names).values_list("app_label", "model"))


def migrations_of(app: str) -> list[str]:
    """The names of ``app``'s migrations on disk, in order."""
    return sorted(name for label, name in MigrationLoader(None).disk_migrations if label == app)


def test_rolling_ingest_back_before_the_handoffs_undoes_no_market_migration():
    # Every ingest migration from the handoffs on, newest first, but the one that created
    # the market's tables; none of the market app's.
    assert undone_by("ingest", BEFORE_HANDOFFS) == [
        ("ingest", name)
        for name in reversed(migrations_of("ingest"))
        if name > BEFORE_HANDOFFS and name != "0005_market_data"
    ]
    # Back to the tables' creation, ingest takes the models again (in its state only);
    # only undoing the creation itself takes the market app with it.
    back_to_creation = undone_by("ingest", "0005_market_data")
    assert back_to_creation[-1] == ("ingest", "0010_market_data_moves_out")
    assert {app for app, _ in back_to_creation} == {"ingest"}
    assert ("market", "0001_initial") in undone_by("ingest", None)


# Rolling ingest back before the handoffs and forward again, twice, keeps every market
# table and row, and market data works meanwhile: checked on the handoff migration's own
# trips (tests/ingest/test_handoff_migration.py), which are the same migrations.


def test_a_new_database_gets_the_market_tables_from_ingest(forward_at_the_end):
    call_command("migrate", "ingest", "zero", verbosity=0)  # ingest's 0005 created them
    assert set(rows().values()) == {None}
    assert applied("market") == set()

    call_command("migrate", verbosity=0)

    assert set(rows().values()) == {0}
    assert market_content_types() == {("market", model._meta.model_name) for model in MODELS}
    with connection.cursor() as cursor:
        for model in MODELS:
            described = connection.introspection.get_table_description(cursor, model._meta.db_table)
            assert {column.name for column in described} == {f.column for f in model._meta.local_fields}
            found = connection.introspection.get_constraints(cursor, model._meta.db_table)
            named = {c.name for c in model._meta.constraints} | {i.name for i in model._meta.indexes}
            assert named <= set(found), model


def test_permissions_and_log_entries_follow_the_models_to_the_market_app(acme, forward_at_the_end):
    feed = market_data(acme)
    content_type = ContentType.objects.get_for_model(MarketFeed)
    viewer = staff("viewer", of=acme)
    viewers = Group.objects.create(name="market viewers")
    view = Permission.objects.get(content_type=content_type, codename="view_marketfeed")
    viewer.user_permissions.add(view)
    viewer.groups.add(viewers)
    viewers.permissions.add(Permission.objects.get(content_type=content_type, codename="change_marketfeed"))
    entry = LogEntry.objects.create(
        user=viewer, content_type=content_type, object_id=str(feed.pk), object_repr="cn", action_flag=ADDITION
    )

    # Before the move, as a database migrated by the previous release has them.
    executor_migrate(("market", None))
    assert ContentType.objects.get(pk=content_type.pk).app_label == "ingest"
    assert market_content_types() == {("ingest", model._meta.model_name) for model in MODELS}
    assert User.objects.get(pk=viewer.pk).has_perm("ingest.view_marketfeed")
    assert rows()["ingest_marketfeed"] == 1

    executor_migrate()

    assert ContentType.objects.get(pk=content_type.pk).app_label == "market"
    assert market_content_types() == {("market", model._meta.model_name) for model in MODELS}
    assert Permission.objects.get(pk=view.pk).content_type_id == content_type.pk
    viewer = User.objects.get(pk=viewer.pk)  # no cached permissions
    assert viewer.has_perm("market.view_marketfeed") and viewer.has_perm("market.change_marketfeed")
    assert not viewer.has_perm("ingest.view_marketfeed")
    entry.refresh_from_db()
    assert entry.content_type_id == content_type.pk


def test_a_content_type_made_while_the_models_were_away_is_folded_into_the_moving_one(
    acme, forward_at_the_end
):
    viewer = staff("viewer", of=acme)
    viewer.user_permissions.add(Permission.objects.get(codename="view_dailybar"))
    call_command("migrate", "market", "zero", verbosity=0)
    # Code asking for the model's content type before the migration ran (the admin
    # logging a change, say) makes one of the market app's.
    ContentType.objects.clear_cache()
    made_meanwhile = ContentType.objects.get_for_model(DailyBar)
    assert ("ingest", "dailybar") in market_content_types() and made_meanwhile.app_label == "market"
    late = staff("late", of=acme)
    late.user_permissions.add(
        Permission.objects.create(content_type=made_meanwhile, codename="change_dailybar", name="Can change")
    )
    entry = LogEntry.objects.create(
        user=late, content_type=made_meanwhile, object_id="1", object_repr="bar", action_flag=ADDITION
    )

    call_command("migrate", verbosity=0)

    assert market_content_types() == {("market", model._meta.model_name) for model in MODELS}
    assert not ContentType.objects.filter(pk=made_meanwhile.pk).exists()
    assert Permission.objects.filter(content_type__model="dailybar").count() == 4
    assert User.objects.get(pk=viewer.pk).has_perm("market.view_dailybar")
    assert User.objects.get(pk=late.pk).has_perm("market.change_dailybar")
    entry.refresh_from_db()
    assert entry.content_type == ContentType.objects.get(app_label="market", model="dailybar")


def test_rolling_back_before_the_reload_triggers_keeps_their_loads(acme, forward_at_the_end):
    feed = MarketFeed.objects.create(
        tenant=acme, name="cn-equities", api_url="http://127.0.0.1:9/", token="t"
    )
    for day, trigger in ((date(2026, 11, 2), "reload"), (date(2026, 11, 3), "refetch")):
        DayLoad.objects.create(feed=feed, trade_date=day, trigger=trigger, status="succeeded", created_at=AT)

    executor_migrate(("market", "0003_history_vocabulary"))

    with connection.cursor() as cursor:
        cursor.execute("SELECT trade_date, trigger FROM ingest_dayload ORDER BY trade_date")
        assert cursor.fetchall() == [(date(2026, 11, 2), "operator"), (date(2026, 11, 3), "gap_fill")]
