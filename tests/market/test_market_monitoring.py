"""What a monitor can rely on: a bad answer from the API fails its load at once and turns
its source to ``error``; an open day the gap-fill no longer reaches is an alert; an
``error`` is HTTP 503; ``rows_today`` counts each row once.

Against the fake market-data API over HTTP where loads run, on the engine's manual clock:
Monday 2026-11-02, 17:00 in Shanghai (09:00 UTC); the daily batch is due at 18:30 there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

import jobs
from devtools.fakes import market_api
from devtools.fakes.market_api import FakeMarket
from jobs.models import Job
from market import batch, freshness
from market.models import (
    BatchStatus,
    DailyBar,
    DailyBatch,
    Dataset,
    DayLoad,
    LoadStatus,
    LoadTrigger,
    MarketFeed,
    SourceFreshness,
    TradingDay,
)
from tests.support.base import as_user, staff
from tests.support.drive import drain

MONDAY = date(2026, 11, 2)
FRIDAY = date(2026, 10, 30)
DUE = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)  # 18:30 in Shanghai
INSTRUMENTS = 60
URL = "/quality/status"
# Only the findings these tests are about alert: an old or thin latest day does not.
LENIENT = {"INGEST_MARKET_CHECK_MAX_AGE_DAYS": 30, "INGEST_MARKET_CHECK_MIN_ROWS": 1}


@pytest.fixture
def market():
    with FakeMarket(instruments=INSTRUMENTS, today=MONDAY) as server:
        server.hold_seconds = 2.0
        yield server


@pytest.fixture(autouse=True)
def short_timeouts():
    with override_settings(INGEST_MARKET_TIMEOUT_SECONDS=0.5, INGEST_HTTP_CONNECT_SECONDS=0.5):
        yield


def feed_of(tenant, url: str = "http://127.0.0.1:9/") -> MarketFeed:
    return MarketFeed.objects.create(tenant=tenant, name="cn-equities", api_url=url, token="demo-token")


def load(feed: MarketFeed, day: date) -> DayLoad:
    (queued,) = batch.queue_loads(feed, [day], LoadTrigger.OPERATOR)
    return queued


def run(clock, name: str, payload: dict[str, Any], feed: MarketFeed) -> None:
    jobs.enqueue(name, payload, tenant=feed.tenant_id)
    drain(clock)


def watchdog() -> tuple[int, list[str]]:
    """``manage.py ingest_check``'s exit code and lines."""
    out = StringIO()
    try:
        call_command("ingest_check", stdout=out)
    except SystemExit as exit_:
        return int(exit_.code or 0), out.getvalue().splitlines()
    return 0, out.getvalue().splitlines()


def quality(user=None) -> tuple[int, dict]:
    answer = as_user(user).get(URL) if user else APIClient().get(URL)
    return answer.status_code, answer.json()


def daily_source(user) -> dict:
    (daily,) = [s for s in quality(user)[1]["sources"] if s["source"] == Dataset.DAILY]
    return daily


# --- a bad answer fails at once, and the monitors say so -------------------------------------


def spoiled(field: str, value: Any) -> Callable[[list[list[Any]]], None]:
    position = market_api.APIS["daily"].fields.index(field)

    def spoil(rows: list[list[Any]]) -> None:
        rows[3][position] = value

    return spoil


def low_above_high(rows: list[list[Any]]) -> None:
    rows[3][4] = rows[3][3] + 1.0


def code_twice(rows: list[list[Any]]) -> None:
    rows[3][0] = rows[2][0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        pytest.param(spoiled("close", math.nan), "item 3's close is not a finite number", id="close-nan"),
        pytest.param(spoiled("high", math.inf), "item 3's high is not a finite number", id="high-inf"),
        pytest.param(
            spoiled("trade_date", "20260230"), "item 3's trade_date is not a YYYYMMDD date", id="no-such-date"
        ),
        pytest.param(low_above_high, "item 3's low", id="low-above-high"),
        pytest.param(code_twice, "item 3's ts_code repeats item 2's", id="code-twice"),
    ],
)
def test_a_bad_value_fails_the_load_at_once_is_recorded_and_alerts(
    acme, clock, market, monkeypatch, settings, spoil, why
):
    settings.INGEST_MARKET_CHECK_MAX_AGE_DAYS = LENIENT["INGEST_MARKET_CHECK_MAX_AGE_DAYS"]
    settings.INGEST_MARKET_CHECK_MIN_ROWS = LENIENT["INGEST_MARKET_CHECK_MIN_ROWS"]
    feed = feed_of(acme, market.url)
    run(clock, batch.LOAD_CALENDAR, {"feed": feed.pk}, feed)
    for status in ("L", "D", "P"):
        run(clock, batch.LOAD_INSTRUMENTS, {"feed": feed.pk, "list_status": status}, feed)
    load(feed, date(2026, 10, 29))
    drain(clock)
    assert quality()[0] == 200  # all healthy so far

    rows = [list(row) for row in market.world.day(FRIDAY)]
    spoil(rows)
    monkeypatch.setattr(market.world, "day", lambda day: rows if day == FRIDAY else [])
    clock.advance(60)
    bad = load(feed, FRIDAY)
    started = clock.now()
    drain(clock)

    bad.refresh_from_db()
    assert bad.status == LoadStatus.FAILED
    assert bad.error.startswith("daily: ") and why in bad.error
    assert market.calls["daily"] == 2  # the good day, then the bad one once: no retry
    job = Job.objects.get(pk=bad.job_id)
    assert (job.state, job.attempts) == ("failed", 1)
    assert clock.now() - started < timedelta(seconds=10)  # no backoff waited for
    assert not DailyBar.objects.filter(feed=feed, trade_date=FRIDAY).exists()  # nothing half-written
    row = SourceFreshness.objects.get(feed=feed, dataset=Dataset.DAILY)
    assert row.last_failure > row.last_success and row.last_error == bad.error
    assert freshness.status(row.last_success, row.last_failure, clock.now()) == "error"

    code, body = quality()
    assert (code, sorted(body), body["status"]) == (503, ["checked_at", "status"], "error")
    source = daily_source(staff("olga", operator=True))
    assert (source["status"], source["last_error"]) == ("error", bad.error)
    code, lines = watchdog()
    assert code == 1
    assert any(
        line.startswith("ALERT acme/cn-equities daily: last attempt failed") and why in line for line in lines
    )


@pytest.mark.django_db(transaction=True)
def test_a_bad_calendar_date_fails_the_calendar_at_once_and_its_batch(acme, clock, market, monkeypatch):
    """The calendar of an earlier load knows today: the batch must not plan on it and
    succeed as if the calendar had loaded."""
    feed = feed_of(acme, market.url)
    run(clock, batch.LOAD_CALENDAR, {"feed": feed.pk}, feed)
    known = TradingDay.objects.filter(feed=feed).count()
    calendar = market_api.APIS["trade_cal"]

    def with_february_30(server: FakeMarket, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows = calendar.rows(server, params)
        rows[-40] = (*rows[-40][:1], "20260230", *rows[-40][2:])
        return rows

    monkeypatch.setitem(market_api.APIS, "trade_cal", market_api.Api(calendar.fields, with_february_30))
    clock.advance((DUE - clock.now()).total_seconds())
    jobs.enqueue("market.Tick")
    drain(clock)

    assert market.calls["trade_cal"] == 2  # the good load, then the bad one once
    (job,) = Job.objects.filter(type=batch.LOAD_CALENDAR, state="failed")
    assert job.attempts == 1
    row = SourceFreshness.objects.get(feed=feed, dataset=Dataset.CALENDAR)
    assert row.last_failure > row.last_success
    assert "cal_date is not a YYYYMMDD date" in row.last_error
    assert TradingDay.objects.filter(feed=feed).count() == known  # nothing written
    done = DailyBatch.objects.get(feed=feed, market_date=MONDAY)
    assert done.status == BatchStatus.FAILED
    assert done.note.startswith(f"its calendar load (job {job.pk}) failed")
    assert not DayLoad.objects.filter(feed=feed).exists()
    assert quality()[0] == 503
    code, lines = watchdog()
    assert code == 1
    assert any(line.startswith("ALERT acme/cn-equities trade_cal: last attempt failed") for line in lines)


# --- gaps older than the look-back -----------------------------------------------------------


def history(feed: MarketFeed, *, first: date, without: set[date], last: date = FRIDAY) -> None:
    """A calendar from October 1 to today (weekdays open), two bars on each open day from
    ``first`` to ``last`` but ``without``, and every source loaded an hour ago."""
    start = date(2026, 10, 1)
    days = [start + timedelta(days=n) for n in range((MONDAY - start).days + 1)]
    TradingDay.objects.bulk_create(
        TradingDay(feed=feed, exchange=feed.exchange, cal_date=day, is_open=day.weekday() < 5) for day in days
    )
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code=code, trade_date=day, open=10, high=11, low=9, close=10.5)
        for day in days
        if first <= day <= last and day.weekday() < 5 and day not in without
        for code in ("600000.SH", "000001.SZ")
    )
    an_hour_ago = jobs.now() - timedelta(hours=1)
    SourceFreshness.objects.bulk_create(
        SourceFreshness(feed=feed, dataset=dataset, last_success=an_hour_ago) for dataset in Dataset.values
    )


@pytest.mark.django_db
@override_settings(**LENIENT)
def test_an_open_day_before_the_look_back_without_bars_is_an_alert_and_an_error(acme, clock):
    """The look-back of Monday's batch starts on October 26: the 14th and 15th are out of
    its reach, the 28th is not (the batch heals it), and the days before the first bar
    (October 12) are where the history starts, not gaps."""
    feed = feed_of(acme)
    history(
        feed, first=date(2026, 10, 12), without={date(2026, 10, 14), date(2026, 10, 15), date(2026, 10, 28)}
    )

    code, lines = watchdog()
    assert code == 1
    assert (
        "ALERT acme/cn-equities old-gaps: 2 open day(s) from 2026-10-12 to the 7-day look-back "
        "(2026-10-26) have no bars, newest 2026-10-15, 2026-10-14: no batch heals them, a gap-fill does"
    ) in lines
    assert lines[-1] == "ALERT: 1 alert(s) in 4 check(s)"

    assert quality() == (503, {"status": "error", "checked_at": "2026-11-02T09:00:00Z"})
    olga = staff("olga", operator=True)
    source = daily_source(olga)
    assert (source["status"], source["old_gaps"], source["last_error"]) == ("error", 2, "")
    assert "newest 2026-10-15, 2026-10-14" in source["message"]
    others = [s for s in quality(olga)[1]["sources"] if s["source"] != Dataset.DAILY]
    assert [(s["status"], s["old_gaps"], s["message"]) for s in others] == [("healthy", 0, "")] * 2

    # Healed by a person: nothing to report any more.
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code="600000.SH", trade_date=day, open=10, high=11, low=9, close=10.5)
        for day in (date(2026, 10, 14), date(2026, 10, 15))
    )
    code, lines = watchdog()
    assert code == 0
    assert lines[3] == (
        "OK acme/cn-equities old-gaps: every open day from 2026-10-12 to the 7-day look-back "
        "(2026-10-26) has bars"
    )
    assert quality() == (200, {"status": "healthy", "checked_at": "2026-11-02T09:00:00Z"})


@pytest.mark.django_db
@override_settings(**LENIENT)
def test_old_gaps_are_looked_for_as_far_back_as_the_alert_setting_and_named_newest_few(acme, clock, settings):
    feed = feed_of(acme)
    missing = {date(2026, 10, day) for day in (2, 5, 6, 7, 8, 9, 12, 13)}
    history(feed, first=date(2026, 10, 1), without=missing)
    code, lines = watchdog()
    assert code == 1
    assert (
        "ALERT acme/cn-equities old-gaps: 8 open day(s) from 2026-10-01 to the 7-day look-back "
        "(2026-10-26) have no bars, newest 2026-10-13, 2026-10-12, 2026-10-09, 2026-10-08, 2026-10-07 "
        "and 3 more: no batch heals them, a gap-fill does"
    ) in lines

    settings.INGEST_MARKET_GAP_ALERT_DAYS = 26  # from October 7
    assert daily_source(staff("olga", operator=True))["message"] == (
        "5 open day(s) from 2026-10-07 to the 7-day look-back (2026-10-26) have no bars, newest "
        "2026-10-13, 2026-10-12, 2026-10-09, 2026-10-08, 2026-10-07: no batch heals them, a gap-fill does"
    )
    settings.INGEST_MARKET_GAP_ALERT_DAYS = 20  # from October 13
    assert "1 open day(s)" in watchdog()[1][3]
    settings.INGEST_MARKET_GAP_ALERT_DAYS = 19
    assert watchdog()[0] == 0


@pytest.mark.django_db(transaction=True)
def test_a_first_batch_on_an_empty_table_raises_no_old_gap(acme, clock, market):
    """Its calendar covers the year; its history starts with the days it loads."""
    feed = feed_of(acme, market.url)
    for at in (DUE, DUE + timedelta(days=1), DUE + timedelta(days=2)):
        clock.advance((at - clock.now()).total_seconds())
        market.set_today(freshness.market_date(at))
        jobs.enqueue("market.Tick")
        drain(clock)
    assert DailyBatch.objects.filter(feed=feed, status=BatchStatus.SUCCEEDED).count() == 3
    assert daily_source(staff("olga", operator=True))["old_gaps"] == 0
    assert quality()[0] == 200


# --- HTTP 503 on error -------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_error_is_503_with_the_same_body_and_anything_else_200(acme, clock):
    now = clock.now()
    feed = feed_of(acme)
    SourceFreshness.objects.bulk_create(
        SourceFreshness(feed=feed, dataset=dataset, last_success=now - timedelta(days=3))
        for dataset in Dataset.values
    )
    assert quality() == (200, {"status": "stale", "checked_at": "2026-11-02T09:00:00Z"})
    SourceFreshness.objects.filter(dataset=Dataset.DAILY).update(
        last_failure=now, last_error="daily: HTTP 503"
    )
    assert quality() == (503, {"status": "error", "checked_at": "2026-11-02T09:00:00Z"})
    code, body = quality(staff("alice", of=acme))
    assert (code, body["status"]) == (503, "error")
    assert [s["status"] for s in body["sources"]] == ["stale", "stale", "error"]
    # A caller shown none of the failing feed's sources is not told of it either way.
    assert quality(staff("mallory"))[0] == 200


def test_the_openapi_schema_documents_the_503_with_the_same_body():
    responses = SchemaGenerator().get_schema(request=None, public=True)["paths"][URL]["get"]["responses"]
    assert set(responses) == {"200", "503"}
    assert responses["503"]["content"] == responses["200"]["content"]
    assert "error" in responses["503"]["description"]


# --- rows_today counts each row once -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_rows_today_counts_each_row_once_however_often_it_was_loaded(acme, clock, market):
    feed = feed_of(acme, market.url)
    for _ in range(2):
        run(clock, batch.LOAD_CALENDAR, {"feed": feed.pk}, feed)
        for status in ("L", "D", "P"):
            run(clock, batch.LOAD_INSTRUMENTS, {"feed": feed.pk, "list_status": status}, feed)
        for day in (MONDAY, FRIDAY):  # today's, and a gap-fill's
            load(feed, day)
            drain(clock)
    bars_today = DailyBar.objects.filter(feed=feed, trade_date=MONDAY).count()
    assert 0 < bars_today < DailyBar.objects.filter(feed=feed).count()
    olga = staff("olga", operator=True)
    rows = {s["source"]: s["rows_today"] for s in quality(olga)[1]["sources"]}
    assert rows == {
        Dataset.CALENDAR: 365,  # 2026, from the latest load
        Dataset.INSTRUMENTS: INSTRUMENTS,  # each once, whichever list it is in
        Dataset.DAILY: bars_today,  # the bars of today, not of every load run today
    }

    # The next market date: nothing loaded on it yet.
    clock.advance(24 * 3600)
    rows = {s["source"]: s["rows_today"] for s in quality(olga)[1]["sources"]}
    assert rows == {Dataset.CALENDAR: 0, Dataset.INSTRUMENTS: 0, Dataset.DAILY: 0}
