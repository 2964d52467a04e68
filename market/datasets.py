"""The three datasets: what each call asks for, how its rows are checked, and the one
statement that upserts them.

Rows go to PostgreSQL as one JSON document of the API's own items (the fields asked for,
in order), which a single ``INSERT … SELECT … ON CONFLICT`` reads: a day of 5,000 bars
is one round trip. A row that changed is updated; a row that did not is left alone, so
loading a day twice writes nothing the second time.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import date
from typing import Any

import jobs
from market.client import BadAnswer, Table
from market.models import (
    DailyBar,
    Dataset,
    Instrument,
    ListStatus,
    MarketFeed,
    TradingDay,
)

_DATE = re.compile(r"^\d{8}$")


def api_date(day: date) -> str:
    return day.strftime("%Y%m%d")


@dataclass(frozen=True)
class Spec:
    api_name: str
    fields: list[str]
    dates: tuple[str, ...]  # fields holding YYYYMMDD dates
    numbers: tuple[str, ...]  # fields holding numbers
    texts: tuple[str, ...]  # fields holding text, with their bound
    bounds: tuple[int, ...]
    required: tuple[str, ...]
    key: tuple[str, ...] = ()  # fields no two rows of one answer share


CALENDAR = Spec(
    Dataset.CALENDAR,
    ["exchange", "cal_date", "is_open", "pretrade_date"],
    dates=("cal_date", "pretrade_date"),
    numbers=("is_open",),
    texts=("exchange",),
    bounds=(10,),
    required=("exchange", "cal_date", "is_open"),
    key=("exchange", "cal_date"),
)
INSTRUMENTS = Spec(
    Dataset.INSTRUMENTS,
    ["ts_code", "symbol", "name", "area", "industry", "market", "list_status", "list_date", "delist_date"],
    dates=("list_date", "delist_date"),
    numbers=(),
    texts=("ts_code", "symbol", "name", "area", "industry", "market", "list_status"),
    bounds=(20, 20, 100, 50, 50, 20, 1),
    required=("ts_code", "list_status"),
    key=("ts_code",),
)
DAILY = Spec(
    Dataset.DAILY,
    [
        "ts_code",
        "trade_date",
        "open",
        "high",
        "low",
        "close",
        "pre_close",
        "change",
        "pct_chg",
        "vol",
        "amount",
    ],
    dates=("trade_date",),
    numbers=("open", "high", "low", "close", "pre_close", "change", "pct_chg", "vol", "amount"),
    texts=("ts_code",),
    bounds=(20,),
    required=("ts_code", "trade_date", "open", "high", "low", "close"),
    key=("ts_code",),
)


def check(spec: Spec, table: Table) -> str:
    """The table's items as one JSON document, once every value is what its field holds;
    else ``BadAnswer`` naming the row and field."""
    position = {name: i for i, name in enumerate(spec.fields)}
    dates = [position[name] for name in spec.dates]
    numbers = [position[name] for name in spec.numbers]
    texts = [(position[name], bound) for name, bound in zip(spec.texts, spec.bounds, strict=True)]
    required = [position[name] for name in spec.required]
    for index, item in enumerate(table.items):
        for i in required:
            if item[i] is None or item[i] == "":
                _refuse(spec, index, spec.fields[i], "is missing")
        for i in dates:
            if item[i] is not None and not _is_date(item[i]):
                _refuse(spec, index, spec.fields[i], "is not a YYYYMMDD date")
        for i in numbers:
            if item[i] is not None and not _is_number(item[i]):
                _refuse(spec, index, spec.fields[i], "is not a finite number")
        for i, bound in texts:
            value = item[i]
            if value is not None and (not isinstance(value, str) or len(value) > bound or "\x00" in value):
                _refuse(spec, index, spec.fields[i], f"is not text of at most {bound} characters")
    if spec is CALENDAR:
        is_open = position["is_open"]
        for index, item in enumerate(table.items):
            if item[is_open] not in (0, 1) or isinstance(item[is_open], bool):
                _refuse(spec, index, "is_open", "is not 0 or 1")
    if spec is INSTRUMENTS:
        status = position["list_status"]
        for index, item in enumerate(table.items):
            if item[status] not in ListStatus.values:
                _refuse(spec, index, "list_status", "is not L, D or P")
    if spec is DAILY:
        low, high = position["low"], position["high"]
        for index, item in enumerate(table.items):
            if item[low] > item[high]:
                _refuse(spec, index, "low", f"({item[low]}) is above its high ({item[high]})")
    if spec.key:
        # Two rows of one key would be one upsert touching a row twice, which PostgreSQL
        # refuses: the answer is wrong, not the database.
        seen: dict[Any, int] = {}
        key = [position[name] for name in spec.key]
        for index, item in enumerate(table.items):
            value = tuple(item[i] for i in key)
            if value in seen:
                _refuse(spec, index, "+".join(spec.key), f"repeats item {seen[value]}'s")
            seen[value] = index
    return json.dumps(table.items, allow_nan=False)


def _is_number(value: Any) -> bool:
    """A finite number a ``float8`` holds (an integer of a thousand digits is none)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _is_date(value: Any) -> bool:
    """A real date written YYYYMMDD (20261399 is eight digits, and no date)."""
    if not isinstance(value, str) or not _DATE.match(value):
        return False
    try:
        date(int(value[:4]), int(value[4:6]), int(value[6:]))
    except ValueError:
        return False
    return True


def _refuse(spec: Spec, index: int, field: str, why: str) -> None:
    raise BadAnswer(spec.api_name, f"{spec.api_name}: item {index}'s {field} {why}")


def _day(expression: str) -> str:
    return f"to_date(NULLIF({expression}, ''), 'YYYYMMDD')"


_UPSERT_CALENDAR = f"""
    INSERT INTO {TradingDay._meta.db_table} AS t (feed_id, exchange, cal_date, is_open,
                                                  pretrade_date)
    SELECT %(feed)s, i->>0, {_day("i->>1")}, (i->>2)::numeric = 1, {_day("i->>3")}
    FROM jsonb_array_elements(%(items)s::jsonb) AS i
    ON CONFLICT (feed_id, exchange, cal_date) DO UPDATE SET
        is_open = EXCLUDED.is_open, pretrade_date = EXCLUDED.pretrade_date
    WHERE (t.is_open, t.pretrade_date) IS DISTINCT FROM (EXCLUDED.is_open,
                                                         EXCLUDED.pretrade_date)"""

_UPSERT_INSTRUMENTS = f"""
    INSERT INTO {Instrument._meta.db_table} AS t (feed_id, ts_code, symbol, name, area,
        industry, market, list_status, list_date, delist_date)
    SELECT %(feed)s, i->>0, COALESCE(i->>1, ''), COALESCE(i->>2, ''), COALESCE(i->>3, ''),
           COALESCE(i->>4, ''), COALESCE(i->>5, ''), i->>6, {_day("i->>7")}, {_day("i->>8")}
    FROM jsonb_array_elements(%(items)s::jsonb) AS i
    ON CONFLICT (feed_id, ts_code) DO UPDATE SET
        symbol = EXCLUDED.symbol, name = EXCLUDED.name, area = EXCLUDED.area,
        industry = EXCLUDED.industry, market = EXCLUDED.market,
        list_status = EXCLUDED.list_status, list_date = EXCLUDED.list_date,
        delist_date = EXCLUDED.delist_date
    WHERE (t.symbol, t.name, t.area, t.industry, t.market, t.list_status, t.list_date,
           t.delist_date) IS DISTINCT FROM (EXCLUDED.symbol, EXCLUDED.name, EXCLUDED.area,
           EXCLUDED.industry, EXCLUDED.market, EXCLUDED.list_status, EXCLUDED.list_date,
           EXCLUDED.delist_date)"""

_BAR_VALUES = ", ".join(f"(i->>{n})::float8" for n in range(2, 11))
_UPSERT_DAILY = f"""
    WITH items AS MATERIALIZED (
        SELECT i FROM jsonb_array_elements(%(items)s::jsonb) AS i
    ), upserted AS (
        INSERT INTO {DailyBar._meta.db_table} AS t (feed_id, ts_code, trade_date, open, high,
            low, close, pre_close, change, pct_chg, vol, amount)
        SELECT %(feed)s, i->>0, {_day("i->>1")}, {_BAR_VALUES}
        FROM items
        ON CONFLICT (feed_id, trade_date, ts_code) DO UPDATE SET
            open = EXCLUDED.open, high = EXCLUDED.high, low = EXCLUDED.low,
            close = EXCLUDED.close, pre_close = EXCLUDED.pre_close, change = EXCLUDED.change,
            pct_chg = EXCLUDED.pct_chg, vol = EXCLUDED.vol, amount = EXCLUDED.amount
        WHERE (t.open, t.high, t.low, t.close, t.pre_close, t.change, t.pct_chg, t.vol,
               t.amount) IS DISTINCT FROM (EXCLUDED.open, EXCLUDED.high, EXCLUDED.low,
               EXCLUDED.close, EXCLUDED.pre_close, EXCLUDED.change, EXCLUDED.pct_chg,
               EXCLUDED.vol, EXCLUDED.amount)
        RETURNING 1
    ), gone AS (
        -- The day is what the API says it is: bars it no longer lists go. (NOT IN over a
        -- subquery is hashed: one pass over the day's bars.)
        DELETE FROM {DailyBar._meta.db_table} d
        WHERE d.feed_id = %(feed)s AND d.trade_date = %(day)s
          AND d.ts_code NOT IN (SELECT i->>0 FROM items)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM upserted), (SELECT count(*) FROM gone)"""


@dataclass(frozen=True)
class Checked:
    """An answer whose every value is what its field holds: its items as the one JSON
    document an upsert reads, and how many there are."""

    items: str
    rows: int


def checked(spec: Spec, table: Table, *, day: date | None = None) -> Checked:
    """``table`` checked (``check``), and for a day's bars each one of ``day``; else
    ``BadAnswer``. A load checks its answer before it writes, so that a bad answer fails
    as the API's error it is, at once and with nothing written."""
    items = check(spec, table)
    if day is not None:
        wanted = api_date(day)
        for index, item in enumerate(table.items):
            if item[1] != wanted:
                _refuse(spec, index, "trade_date", f"is {item[1]}, not the day asked for ({wanted})")
    return Checked(items, len(table.items))


def upsert_calendar(feed: MarketFeed, answer: Checked) -> int:
    jobs.execute_prepared(_UPSERT_CALENDAR, {"feed": feed.pk, "items": answer.items})
    return answer.rows


def upsert_instruments(feed: MarketFeed, answer: Checked) -> int:
    jobs.execute_prepared(_UPSERT_INSTRUMENTS, {"feed": feed.pk, "items": answer.items})
    return answer.rows


def upsert_daily(feed: MarketFeed, day: date, answer: Checked) -> dict[str, int]:
    """The day's bars made equal to the checked answer (``checked(DAILY, table, day=day)``):
    how many rows the API gave, how many were written (new or changed) and how many
    removed."""
    written, removed = jobs.execute_prepared(
        _UPSERT_DAILY, {"feed": feed.pk, "day": day, "items": answer.items}
    ).fetchone()
    return {"rows": answer.rows, "written": written, "removed": removed}


def params(**values: Any) -> dict[str, Any]:
    """A call's params, dates as the API writes them."""
    return {key: api_date(value) if isinstance(value, date) else value for key, value in values.items()}
