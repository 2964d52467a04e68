"""Properties of reading the market-data API's answers: whatever comes back, a call ends
in a table or in a ``MarketError`` of the right kind, and a dataset's rows are taken
whole or refused naming the first bad value."""

from __future__ import annotations

import json
from datetime import date

from hypothesis import given
from hypothesis import strategies as st

from market import client, datasets

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)

DAY = st.dates(min_value=date(1990, 1, 1), max_value=date(2100, 12, 31)).map(
    lambda day: day.strftime("%Y%m%d")
)
PRICE = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


def _bar(values: tuple) -> list:
    code, day, a, b, c, d, *rest = values
    return [code, day, a, max(a, b, c, d), min(a, b, c, d), d, *rest]


BAR = st.tuples(
    st.text(min_size=1, max_size=20).filter(lambda text: "\x00" not in text),
    DAY,
    PRICE,
    PRICE,
    PRICE,
    PRICE,
    *[st.none() | PRICE] * 5,
).map(_bar)
BARS = st.lists(BAR, max_size=20, unique_by=lambda bar: bar[0])


@given(status=st.integers(100, 599), body=JSON | st.binary(max_size=50))
def test_any_answer_is_a_table_or_a_market_error(status, body):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        table = client._table("daily", (status, content), datasets.DAILY.fields)
    except client.MarketError as error:
        assert error.api_name == "daily"
        assert error.retry == (isinstance(error, client.Transient))
    else:
        assert status == 200 and table.fields == datasets.DAILY.fields


@given(status=st.integers(500, 599))
def test_every_5xx_is_retried(status):
    try:
        client._table("daily", (status, b"<html>bad gateway</html>"), datasets.DAILY.fields)
    except client.MarketError as error:
        assert error.retry


@given(rows=BARS)
def test_well_formed_bars_are_taken_whole(rows):
    taken = datasets.check(datasets.DAILY, client.Table(datasets.DAILY.fields, rows))
    assert json.loads(taken) == rows


@given(rows=st.lists(BAR, min_size=1, max_size=10, unique_by=lambda bar: bar[0]), data=st.data())
def test_one_bad_value_refuses_the_rows_naming_it(rows, data):
    index = data.draw(st.integers(0, len(rows) - 1))
    field = data.draw(st.sampled_from(["trade_date", "open", "ts_code"]))
    position = datasets.DAILY.fields.index(field)
    bad = {"trade_date": "2026-10-30", "open": "1.5", "ts_code": None}[field]
    rows[index][position] = bad
    try:
        datasets.check(datasets.DAILY, client.Table(datasets.DAILY.fields, rows))
    except client.BadAnswer as error:
        assert f"item {index}'s {field}" in str(error)
    else:
        raise AssertionError("a bad value was taken")


@given(text=st.from_regex(r"\A\d{8}\Z"))
def test_eight_digits_are_a_date_only_when_they_are_one(text):
    row = ["600000.SH", text, 1.0, 2.0, 0.5, 1.5, None, None, None, None, None]
    try:
        real = date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError:
        real = None
    try:
        datasets.check(datasets.DAILY, client.Table(datasets.DAILY.fields, [row]))
    except client.BadAnswer:
        assert real is None
    else:
        assert real is not None


@given(rows=st.lists(BAR, min_size=2, max_size=10, unique_by=lambda bar: bar[0]), data=st.data())
def test_a_code_twice_or_a_low_above_its_high_is_refused(rows, data):
    index = data.draw(st.integers(1, len(rows) - 1))
    if data.draw(st.booleans()):
        rows[index][0] = rows[0][0]
        why = "ts_code repeats item 0's"
    else:
        rows[index][3], rows[index][4] = rows[index][4] - 1, rows[index][4]
        why = "low"
    try:
        datasets.check(datasets.DAILY, client.Table(datasets.DAILY.fields, rows))
    except client.BadAnswer as error:
        assert f"item {index}'s {why}" in str(error)
    else:
        raise AssertionError("the rows were taken")
