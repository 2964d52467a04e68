"""Days that have bars can be fetched again: an operator's reload of chosen days
(``services.reload``), and the daily batch's re-fetch of its last open days
(``MARKET_REFETCH_DAYS``), so that a restatement the API publishes after a day's load
arrives. The load upserts: bars that did not change are not written again.

Against the fake market-data API over HTTP, on the engine's manual clock, from Monday
2026-11-02 at 17:00 in Shanghai; the batch is due at 18:30 there (10:30 UTC). A bar
changed in the table stands for the API's restatement of it (the API's answer is the
truth the load brings back).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.test import override_settings

import jobs
from devtools.fakes.market_api import FakeMarket
from jobs.models import Job
from market import batch, freshness, services
from market.models import (
    BatchStatus,
    DailyBar,
    DailyBatch,
    DayLoad,
    LoadStatus,
    LoadTrigger,
    MarketAction,
    MarketFeed,
)
from tests.support.base import staff
from tests.support.drive import drain

pytestmark = pytest.mark.django_db(transaction=True)

MONDAY = date(2026, 11, 2)
FRIDAY = date(2026, 10, 30)
DUE = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)  # 18:30 in Shanghai
INSTRUMENTS = 60
CODE = "600000.SH"


@pytest.fixture
def market():
    with FakeMarket(instruments=INSTRUMENTS, today=MONDAY) as server:
        yield server


@pytest.fixture
def feed(acme, market) -> MarketFeed:
    return MarketFeed.objects.create(tenant=acme, name="cn-equities", api_url=market.url, token="demo-token")


@pytest.fixture(autouse=True)
def short_timeouts():
    with override_settings(INGEST_MARKET_TIMEOUT_SECONDS=0.5, INGEST_HTTP_CONNECT_SECONDS=0.5):
        yield


def run_batch(clock, market: FakeMarket, at: datetime) -> None:
    clock.advance((at - clock.now()).total_seconds())
    market.set_today(freshness.market_date(at))
    jobs.enqueue("market.Tick")
    drain(clock)


def restate(feed: MarketFeed, day: date) -> None:
    """The API now says something else of one bar of ``day`` than the table holds."""
    assert DailyBar.objects.filter(feed=feed, trade_date=day, ts_code=CODE).update(close=0.01) == 1


def restated(feed: MarketFeed, day: date) -> bool:
    """Whether the table still holds the bar as it was before the restatement."""
    return DailyBar.objects.filter(feed=feed, trade_date=day, ts_code=CODE, close=0.01).exists()


def written(load: DayLoad) -> int:
    return Job.objects.get(pk=load.job_id).result["written"]


def test_todays_restatement_after_the_batch_arrives_by_an_operators_reload(clock, feed, market):
    alice = staff("alice")
    run_batch(clock, market, DUE)
    restate(feed, MONDAY)
    restate(feed, FRIDAY)
    # A gap-fill has nothing to fetch: every open day has bars.
    assert services.preview_gap_fill(feed, FRIDAY, MONDAY).to_fetch == []

    preview = services.preview_reload(feed, services.days_between(FRIDAY, MONDAY))

    assert [(row.day, row.calendar, row.bars, row.covered_by) for row in preview.rows] == [
        (MONDAY, "open", INSTRUMENTS - 2, None),
        (date(2026, 11, 1), "closed", 0, None),
        (date(2026, 10, 31), "closed", 0, None),
        (FRIDAY, "open", INSTRUMENTS - 2, None),
    ]
    assert (preview.to_fetch, preview.api_calls, preview.refusal()) == ([MONDAY, FRIDAY], 2, "")
    assert not DayLoad.objects.filter(trigger=LoadTrigger.RELOAD).exists()  # a preview writes nothing

    _, loads = services.reload(
        feed, preview.days, actor=alice, via="admin", reason="the vendor restated the week"
    )
    assert [(load.trade_date, load.trigger, load.requested_by) for load in loads] == [
        (MONDAY, LoadTrigger.RELOAD, alice),
        (FRIDAY, LoadTrigger.RELOAD, alice),
    ]
    calls = market.calls["daily"]
    drain(clock)

    assert market.calls["daily"] == calls + 2
    assert not restated(feed, MONDAY) and not restated(feed, FRIDAY)
    assert [written(load) for load in loads] == [1, 1]  # the restated bar, nothing else
    action = MarketAction.objects.get()
    assert (action.feed, action.kind, action.actor, action.via, action.message) == (
        feed,
        "reload",
        alice,
        "admin",
        "the vendor restated the week",
    )
    assert action.detail == {
        "days": ["2026-11-02", "2026-11-01", "2026-10-31", "2026-10-30"],
        "queued": ["2026-11-02", "2026-10-30"],
        "covered": {},
        "closed": ["2026-11-01", "2026-10-31"],
    }


def test_reloading_unchanged_bars_writes_nothing(clock, feed, market):
    run_batch(clock, market, DUE)
    before = list(DailyBar.objects.filter(feed=feed, trade_date=MONDAY).order_by("ts_code").values())

    _, (load,) = services.reload(feed, [MONDAY], actor=None, via="command", reason="check")
    drain(clock)

    load.refresh_from_db()
    assert (load.status, load.rows, written(load)) == (LoadStatus.SUCCEEDED, INSTRUMENTS - 2, 0)
    assert list(DailyBar.objects.filter(feed=feed, trade_date=MONDAY).order_by("ts_code").values()) == before


def test_a_day_a_load_covers_already_is_not_loaded_twice(clock, feed, market):
    run_batch(clock, market, DUE)
    (covering,) = batch.queue_loads(feed, [FRIDAY], LoadTrigger.OPERATOR)

    preview, loads = services.reload(feed, [FRIDAY, MONDAY], actor=None, via="command", reason="restated")

    assert preview.covered == {FRIDAY: covering}
    assert [load.trade_date for load in loads] == [MONDAY]
    assert MarketAction.objects.get().detail["covered"] == {"2026-10-30": covering.pk}


def test_without_the_re_fetch_window_a_restatement_never_arrives(clock, feed, market):
    run_batch(clock, market, DUE)
    restate(feed, MONDAY)

    run_batch(clock, market, DUE + timedelta(days=1))

    assert restated(feed, MONDAY)
    assert not DayLoad.objects.filter(trigger=LoadTrigger.REFETCH).exists()


@override_settings(INGEST_MARKET_REFETCH_DAYS=2)
def test_the_batch_re_fetches_its_last_open_days_that_have_bars(clock, feed, market):
    run_batch(clock, market, DUE)
    # The first batch had nothing to re-fetch: the days before it had no bars (its gaps).
    assert not DayLoad.objects.filter(trigger=LoadTrigger.REFETCH).exists()
    restate(feed, MONDAY)
    restate(feed, FRIDAY)
    calls = market.calls["daily"]

    run_batch(clock, market, DUE + timedelta(days=1))

    tuesday = DailyBatch.objects.get(feed=feed, market_date=date(2026, 11, 3))
    assert (tuesday.status, tuesday.gaps) == (BatchStatus.SUCCEEDED, ["2026-10-27"])
    refetched = DayLoad.objects.filter(batch=tuesday, trigger=LoadTrigger.REFETCH).order_by("-trade_date")
    assert [load.trade_date for load in refetched] == [MONDAY, FRIDAY]
    assert [written(load) for load in refetched] == [1, 1]
    assert not restated(feed, MONDAY) and not restated(feed, FRIDAY)
    assert market.calls["daily"] == calls + 4  # the gap, Tuesday and the two re-fetches
    assert tuesday.note == "4 day(s) loaded"
    plan = Job.objects.get(type=batch.PLAN_BATCH, payload__batch=tuesday.pk)
    assert plan.result["refetch"] == ["2026-11-02", "2026-10-30"]


def test_the_re_fetch_window_is_bounded(settings):
    settings.INGEST_MARKET_REFETCH_DAYS = 1000
    assert batch.refetch_days() == batch.REFETCH_MAX_DAYS
    settings.INGEST_MARKET_REFETCH_DAYS = -3
    assert batch.refetch_days() == 0
    settings.INGEST_MARKET_REFETCH_DAYS = 3
    assert batch.refetch_days() == 3
