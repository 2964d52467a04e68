"""How fresh a feed's data is: recording each load's outcome, and the status a person
or a monitor reads from it.

The status of a source (a feed's dataset), first rule that applies:

========================================================  ================
neither a success nor a failure recorded                   ``never_ingested``
the last attempt failed (a failure after the last
success, or failures and no success)                      ``error``
the last success within 48 hours                           ``healthy``
the last success 48 hours to 7 days ago                    ``stale``
the last success more than 7 days ago                      ``error``
========================================================  ================

A week without a success is an error, not staleness: the gap-fill looks back 7 days,
so older days no longer heal by themselves and need a person. For the same reason the
daily source is an ``error`` too while an open day before the look-back has no bars
(``services.old_gaps``), whatever its last attempt did.

``rows_today`` counts each row once, on the current market date: the daily bars of
that date, the feed's instruments once a load of them succeeded that day (the three
lists, ``L``, ``D`` and ``P``, are three loads), and the calendar rows its latest
successful load of that day gave. Gap-fills and reloads of a day add nothing.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from django.db import connection

from market import conf
from market.models import DailyBar, Dataset, Instrument, MarketFeed, SourceFreshness

HEALTHY = "healthy"
STALE = "stale"
ERROR = "error"
NEVER_INGESTED = "never_ingested"
# From best to worst: the overall status is the worst of its sources'.
SEVERITY = {HEALTHY: 0, STALE: 1, NEVER_INGESTED: 2, ERROR: 3}

FRESH_FOR = timedelta(hours=48)
STALE_FOR = timedelta(days=7)


def market_timezone() -> ZoneInfo:
    return ZoneInfo(str(conf.get("MARKET_TIMEZONE")))


def market_date(at: datetime) -> date:
    """The market's calendar date at ``at``."""
    return at.astimezone(market_timezone()).date()


def status(last_success: datetime | None, last_failure: datetime | None, now: datetime) -> str:
    if last_success is None and last_failure is None:
        return NEVER_INGESTED
    if last_failure is not None and (last_success is None or last_failure > last_success):
        return ERROR
    age = now - last_success
    if age <= FRESH_FOR:
        return HEALTHY
    if age <= STALE_FOR:
        return STALE
    return ERROR


def overall(statuses: list[str]) -> str:
    """The worst of ``statuses``; with none, nothing was ever ingested."""
    return max(statuses, key=SEVERITY.__getitem__, default=NEVER_INGESTED)


def rows_today(row: SourceFreshness, now: datetime) -> int:
    """The source's rows of the current market date, each once (see the module's
    docstring): counted where a sum of loads would count a day loaded twice twice."""
    today = market_date(now)
    daily, instruments = row.dataset == Dataset.DAILY, row.dataset == Dataset.INSTRUMENTS
    return rows_of(
        row,
        today,
        bars=DailyBar.objects.filter(feed_id=row.feed_id, trade_date=today).count() if daily else 0,
        instruments=Instrument.objects.filter(feed_id=row.feed_id).count() if instruments else 0,
    )


def rows_of(row: SourceFreshness, today: date, *, bars: int, instruments: int) -> int:
    """``rows_today`` on market date ``today``, given the feed's bars of that date and
    its instruments."""
    if row.dataset == Dataset.DAILY:
        return bars
    if row.rows_date != today:
        return 0
    return instruments if row.dataset == Dataset.INSTRUMENTS else row.rows_today


_RECORD_SUCCESS = f"""
    INSERT INTO {SourceFreshness._meta.db_table} AS f (feed_id, dataset, last_success,
        last_failure, last_error, rows_today, rows_date)
    VALUES (%(feed)s, %(dataset)s, %(now)s, NULL, '', %(rows)s, %(today)s)
    ON CONFLICT (feed_id, dataset) DO UPDATE SET
        last_success = GREATEST(f.last_success, EXCLUDED.last_success),
        rows_today = EXCLUDED.rows_today, rows_date = EXCLUDED.rows_date"""

_RECORD_FAILURE = f"""
    INSERT INTO {SourceFreshness._meta.db_table} AS f (feed_id, dataset, last_success,
        last_failure, last_error, rows_today, rows_date)
    VALUES (%(feed)s, %(dataset)s, NULL, %(now)s, %(error)s, 0, NULL)
    ON CONFLICT (feed_id, dataset) DO UPDATE SET
        last_failure = EXCLUDED.last_failure, last_error = EXCLUDED.last_error"""


def record_success(feed: MarketFeed, dataset: str, rows: int, now: datetime) -> None:
    """A load of ``rows`` rows succeeded: the latest load's rows replace the last one's
    (a day loaded twice is not twice the rows). One statement, so that loads of one
    source finishing together each leave a whole row."""
    with connection.cursor() as cursor:
        cursor.execute(
            _RECORD_SUCCESS,
            {"feed": feed.pk, "dataset": dataset, "now": now, "rows": rows, "today": market_date(now)},
        )


def record_failure(feed: MarketFeed, dataset: str, error: str, now: datetime) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            _RECORD_FAILURE, {"feed": feed.pk, "dataset": dataset, "now": now, "error": error[:4000]}
        )
