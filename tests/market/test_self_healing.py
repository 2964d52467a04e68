"""Market-data ingest that heals itself, against the fake market-data API over HTTP, on
the engine's manual clock (no test waits for a backoff).

The clock starts on Monday 2026-11-02 at 17:00 in Shanghai (09:00 UTC); the daily
batch is due at 18:30 there (10:30 UTC).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.test import override_settings

import jobs
from devtools.fakes.market_api import FakeMarket
from jobs.models import Job
from market import batch, freshness
from market.models import (
    BatchStatus,
    DailyBar,
    DailyBatch,
    Dataset,
    DayLoad,
    Instrument,
    LoadStatus,
    LoadTrigger,
    MarketFeed,
    SourceFreshness,
    TradingDay,
)
from tests.support.drive import drain

pytestmark = pytest.mark.django_db(transaction=True)

MONDAY = date(2026, 11, 2)
DUE = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)  # 18:30 in Shanghai
INSTRUMENTS = 60


@pytest.fixture
def market():
    with FakeMarket(instruments=INSTRUMENTS, today=MONDAY) as server:
        server.hold_seconds = 2.0
        yield server


@pytest.fixture
def feed(acme, market) -> MarketFeed:
    return MarketFeed.objects.create(tenant=acme, name="cn-equities", api_url=market.url, token="demo-token")


@pytest.fixture(autouse=True)
def short_timeouts():
    with override_settings(INGEST_MARKET_TIMEOUT_SECONDS=0.5, INGEST_HTTP_CONNECT_SECONDS=0.5):
        yield


def load(feed: MarketFeed, day: date) -> DayLoad:
    (queued,) = batch.queue_loads(feed, [day], LoadTrigger.OPERATOR)
    return queued


def calendar(feed: MarketFeed, clock) -> None:
    jobs.enqueue(batch.LOAD_CALENDAR, {"feed": feed.pk}, tenant=feed.tenant_id)
    drain(clock)


def days_with_bars(feed: MarketFeed) -> list[date]:
    return sorted(
        DailyBar.objects.filter(feed=feed).order_by().values_list("trade_date", flat=True).distinct()
    )


def run_batch(clock, market: FakeMarket, at: datetime) -> None:
    """A tick at ``at``, and everything it queues run; the API's today is the market's."""
    clock.advance((at - clock.now()).total_seconds())
    market.set_today(freshness.market_date(at))
    jobs.enqueue("market.Tick")
    drain(clock)


def test_a_fetch_that_fails_twice_then_succeeds_is_retried_by_the_engine(clock, feed, market):
    calendar(feed, clock)
    market.fail("daily", "500", times=2)
    started = clock.now()
    queued = load(feed, date(2026, 10, 30))
    drain(clock)
    queued.refresh_from_db()
    assert (queued.status, queued.rows) == (LoadStatus.SUCCEEDED, INSTRUMENTS - 2)
    assert market.calls["daily"] == 3
    job = Job.objects.get(pk=queued.job_id)
    assert (job.state, job.attempts) == ("succeeded", 3)
    # Waited 10 s, then 20 s, on the engine's clock: attempts, not sleeps.
    assert clock.now() - started >= timedelta(seconds=30)
    row = SourceFreshness.objects.get(feed=feed, dataset=Dataset.DAILY)
    assert row.last_success > row.last_failure
    assert freshness.status(row.last_success, row.last_failure, clock.now()) == "healthy"


def test_three_transient_failures_fail_the_load_naming_the_api_and_the_last_error(clock, feed, market):
    calendar(feed, clock)
    market.fail("daily", "timeout", times=1)
    market.fail("daily", "reset", times=1)
    market.fail("daily", "503", times=1)
    queued = load(feed, date(2026, 10, 30))
    drain(clock)
    queued.refresh_from_db()
    assert queued.status == LoadStatus.FAILED
    assert queued.error == "daily failed after 3 attempts: daily: HTTP 503 from the API"
    assert Job.objects.get(pk=queued.job_id).last_error.endswith(queued.error)
    row = SourceFreshness.objects.get(feed=feed, dataset=Dataset.DAILY)
    assert row.last_failure is not None and row.last_success is None
    assert row.last_error == queued.error


@pytest.mark.parametrize(
    ("kind", "why"),
    [("401", "authentication refused"), ("429", "rate limited"), ("rate_limit", "rate limited")],
)
def test_authentication_errors_and_rate_limits_are_not_retried(clock, feed, market, kind, why):
    calendar(feed, clock)
    market.fail("daily", kind, times=1)
    queued = load(feed, date(2026, 10, 30))
    drain(clock)
    queued.refresh_from_db()
    assert queued.status == LoadStatus.FAILED and why in queued.error
    assert market.calls["daily"] == 1
    assert Job.objects.get(pk=queued.job_id).attempts == 1


def test_a_wrong_token_fails_the_calendar_at_once(clock, feed, market):
    MarketFeed.objects.filter(pk=feed.pk).update(token="wrong")
    calendar(feed, clock)
    assert market.calls["trade_cal"] == 1
    row = SourceFreshness.objects.get(feed=feed, dataset=Dataset.CALENDAR)
    assert "authentication refused" in row.last_error


def test_the_first_batch_on_an_empty_table_fills_at_most_three_days(clock, feed, market):
    run_batch(clock, market, DUE)
    done = DailyBatch.objects.get(feed=feed, market_date=MONDAY)
    assert done.status == BatchStatus.SUCCEEDED
    # The look-back's open days are Oct 26-30 (Mon-Fri); the three newest are filled.
    assert done.gaps == ["2026-10-30", "2026-10-29", "2026-10-28"]
    assert days_with_bars(feed) == [date(2026, 10, 28), date(2026, 10, 29), date(2026, 10, 30), MONDAY]
    assert Instrument.objects.filter(feed=feed).count() == INSTRUMENTS
    assert TradingDay.objects.filter(feed=feed, cal_date=MONDAY, is_open=True).exists()
    # The next day's batch heals what is left of its own 7 days (from Oct 27); Oct 26 is
    # out of reach, for an operator's gap-fill.
    run_batch(clock, market, DUE + timedelta(days=1))
    assert DailyBatch.objects.get(market_date=date(2026, 11, 3)).gaps == ["2026-10-27"]
    assert days_with_bars(feed)[0] == date(2026, 10, 27)


def test_a_deleted_day_is_restored_by_the_next_batch(clock, feed, market):
    run_batch(clock, market, DUE)
    run_batch(clock, market, DUE + timedelta(days=1))
    before = DailyBar.objects.filter(feed=feed, trade_date=date(2026, 10, 30)).count()
    DailyBar.objects.filter(feed=feed, trade_date=date(2026, 10, 30)).delete()
    run_batch(clock, market, DUE + timedelta(days=2))
    assert DailyBatch.objects.get(market_date=date(2026, 11, 4)).gaps == ["2026-10-30"]
    assert DailyBar.objects.filter(feed=feed, trade_date=date(2026, 10, 30)).count() == before


def test_a_closed_day_in_the_calendar_is_no_gap(clock, feed, market):
    calendar(feed, clock)
    TradingDay.objects.filter(feed=feed, cal_date=date(2026, 10, 29)).update(is_open=False)
    assert batch.gaps(feed, since=date(2026, 10, 26), before=MONDAY) == [
        date(2026, 10, 30),
        date(2026, 10, 28),
        date(2026, 10, 27),
        date(2026, 10, 26),
    ]


def test_the_same_day_loaded_twice_leaves_the_same_rows(clock, feed, market):
    calendar(feed, clock)
    load(feed, date(2026, 10, 30))
    drain(clock)
    first = list(DailyBar.objects.filter(feed=feed).order_by("ts_code").values())
    second = load(feed, date(2026, 10, 30))
    drain(clock)
    assert list(DailyBar.objects.filter(feed=feed).order_by("ts_code").values()) == first
    assert Job.objects.get(pk=second.job_id).result["written"] == 0


def test_a_day_already_being_loaded_is_not_queued_twice(clock, feed):
    first = batch.queue_loads(feed, [date(2026, 10, 30)], LoadTrigger.OPERATOR)
    again = batch.queue_loads(feed, [date(2026, 10, 30), date(2026, 10, 29)], LoadTrigger.OPERATOR)
    assert [load.trade_date for load in again] == [date(2026, 10, 29)]
    assert batch.covering(feed, [date(2026, 10, 30)]) == {date(2026, 10, 30): first[0]}


def test_a_batch_not_yet_published_is_retried_then_fails_and_heals_the_next_day(clock, feed, market):
    market.set_missing_day(MONDAY)
    run_batch(clock, market, DUE)
    done = DailyBatch.objects.get(market_date=MONDAY)
    assert done.status == BatchStatus.FAILED and "2026-11-02" in done.note
    assert market.calls["daily"] == 3 + 3  # three gaps at once, Monday three times
    market.clear()
    run_batch(clock, market, DUE + timedelta(days=1))
    assert MONDAY in days_with_bars(feed)


def test_a_cluster_back_within_the_grace_still_runs_the_batch(clock, feed, market):
    run_batch(clock, market, DUE + timedelta(hours=1, minutes=55))
    assert DailyBatch.objects.get(market_date=MONDAY).status == BatchStatus.SUCCEEDED


def test_a_cluster_back_past_the_grace_records_the_miss(clock, feed, market):
    run_batch(clock, market, DUE + timedelta(hours=2, minutes=1))
    missed = DailyBatch.objects.get(market_date=MONDAY)
    assert missed.status == BatchStatus.MISSED and "misfire grace" in missed.note
    assert sum(market.calls.values()) == 0
    # Once missed, the day is not started later that evening either.
    run_batch(clock, market, DUE + timedelta(hours=3))
    assert DailyBatch.objects.filter(market_date=MONDAY).count() == 1


def test_no_batch_before_its_hour_nor_on_a_weekend(clock, feed, market):
    run_batch(clock, market, DUE - timedelta(minutes=1))
    assert not DailyBatch.objects.exists()
    run_batch(clock, market, DUE + timedelta(days=5))  # Saturday
    assert not DailyBatch.objects.filter(market_date=date(2026, 11, 7)).exists()


def test_a_reload_makes_the_day_what_the_api_says_it_is(clock, feed, market):
    calendar(feed, clock)
    load(feed, date(2026, 10, 30))
    drain(clock)
    DailyBar.objects.create(
        feed=feed, ts_code="999999.SH", trade_date=date(2026, 10, 30), open=1, high=1, low=1, close=1
    )
    DailyBar.objects.filter(feed=feed, ts_code="600000.SH").update(close=0.01)
    again = load(feed, date(2026, 10, 30))
    drain(clock)
    result = Job.objects.get(pk=again.job_id).result
    assert (result["written"], result["removed"]) == (1, 1)
    assert not DailyBar.objects.filter(ts_code="999999.SH").exists()
    assert DailyBar.objects.filter(feed=feed, trade_date=date(2026, 10, 30)).count() == (INSTRUMENTS - 2)


def test_a_bad_row_from_the_api_fails_the_load_naming_it_and_writes_nothing(clock, feed):
    from market import datasets
    from market.client import BadAnswer, Table

    items = [
        ["600000.SH", "20261030", 1.0, 2.0, 0.5, 1.5, None, None, None, None, None],
        ["600001.SH", "2026-10-30", 1.0, 2.0, 0.5, 1.5, None, None, None, None, None],
    ]
    with pytest.raises(BadAnswer, match="item 1's trade_date is not a YYYYMMDD date"):
        datasets.checked(datasets.DAILY, Table(datasets.DAILY.fields, items), day=date(2026, 10, 30))
    assert not DailyBar.objects.exists()


def test_a_feed_at_an_address_the_outbound_rules_refuse_is_never_called(clock, feed, market, settings):
    settings.INTAKE_HTTP_ALLOW = []
    calendar(feed, clock)
    assert sum(market.calls.values()) == 0
    row = SourceFreshness.objects.get(feed=feed, dataset=Dataset.CALENDAR)
    assert "is not allowed: its host is not a public internet address" in row.last_error
    assert Job.objects.get(type=batch.LOAD_CALENDAR).attempts == 1


def test_a_load_whose_job_ended_without_it_is_failed_by_the_next_tick(clock, feed, market):
    stuck = load(feed, date(2026, 10, 30))
    jobs.cancel(Job.objects.get(pk=stuck.job_id), reason="test")
    run_batch(clock, market, DUE - timedelta(minutes=1))  # before 18:30: only the sweep
    stuck.refresh_from_db()
    assert stuck.status == LoadStatus.FAILED
    assert stuck.error == f"its job {stuck.job_id} ended without finishing the load"
    assert [
        again.trade_date for again in batch.queue_loads(feed, [date(2026, 10, 30)], LoadTrigger.OPERATOR)
    ] == [date(2026, 10, 30)]


def test_a_batch_whose_plan_never_ran_is_settled_hours_later(clock, feed, market):
    stalled = DailyBatch.objects.create(
        feed=feed, market_date=MONDAY, status=BatchStatus.RUNNING, due_at=DUE, started_at=DUE
    )
    run_batch(clock, market, DUE + timedelta(hours=6, minutes=5))
    stalled.refresh_from_db()
    assert stalled.status == BatchStatus.FAILED
    assert "did not run to the end" in stalled.note


def test_a_closed_day_answered_empty_leaves_its_bars_alone(clock, feed, market):
    calendar(feed, clock)
    saturday = date(2026, 10, 31)
    DailyBar.objects.create(
        feed=feed, ts_code="600000.SH", trade_date=saturday, open=1, high=1, low=1, close=1
    )
    done = load(feed, saturday)
    drain(clock)
    done.refresh_from_db()
    assert (done.status, done.rows) == (LoadStatus.SUCCEEDED, 0)
    assert DailyBar.objects.filter(trade_date=saturday).count() == 1


def test_an_answer_over_the_size_bound_fails_the_load_at_once(clock, feed, market, settings):
    calendar(feed, clock)
    settings.INGEST_MARKET_MAX_BYTES = 1000
    over = load(feed, date(2026, 10, 30))
    drain(clock)
    over.refresh_from_db()
    assert (over.status, over.error) == (LoadStatus.FAILED, "daily: the answer is over 1,000 bytes")
    assert market.calls["daily"] == 1
