"""The fake market-data API, through real HTTP: the Tushare Pro protocol, its data rules,
its errors and each fault it can be told to make."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.fakes.market_api import AUTH_MESSAGE, RATE_LIMIT_MESSAGE, FakeMarket
from jobs.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]  # the checkout, whose root holds devtools
TODAY = date(2026, 11, 2)  # a Monday
INSTRUMENTS = 200
DAILY_FIELDS = [
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
]


@pytest.fixture
def market():
    with FakeMarket(instruments=INSTRUMENTS, today=TODAY) as server:
        yield server


def post(
    market: FakeMarket,
    api_name: str,
    params: dict[str, Any] | None = None,
    fields: str = "",
    *,
    token: str = "demo-token",
    timeout: float = 5.0,
) -> httpx.Response:
    return httpx.post(
        market.url,
        json={"api_name": api_name, "token": token, "params": params or {}, "fields": fields},
        timeout=timeout,
    )


def table(
    market: FakeMarket, api_name: str, params: dict[str, Any] | None = None, fields: str = ""
) -> dict[str, Any]:
    response = post(market, api_name, params, fields)
    assert response.status_code == 200
    answer = response.json()
    assert answer["code"] == 0, answer
    return answer["data"]


def test_a_call_is_answered_with_a_table_in_the_protocol_shape(market):
    response = post(market, "trade_cal", {"start_date": "20261026", "end_date": "20261030"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert set(answer) == {"request_id", "code", "msg", "data"}
    assert len(answer["request_id"]) == 32 and int(answer["request_id"], 16) >= 0
    assert (answer["code"], answer["msg"]) == (0, "")
    assert answer["data"] == {
        "fields": ["exchange", "cal_date", "is_open", "pretrade_date"],
        "items": [
            ["SSE", "20261030", 1, "20261029"],
            ["SSE", "20261029", 1, "20261028"],
            ["SSE", "20261028", 1, "20261027"],
            ["SSE", "20261027", 1, "20261026"],
            ["SSE", "20261026", 1, "20261023"],
        ],
        "has_more": False,
    }


def test_the_calendar_closes_weekends_and_the_listed_holidays_newest_first(market):
    data = table(market, "trade_cal", {"exchange": "SSE", "start_date": "20260925", "end_date": "20261012"})
    days = {cal_date: (is_open, pretrade) for _, cal_date, is_open, pretrade in data["items"]}
    assert [item[1] for item in data["items"]] == sorted(days, reverse=True)
    assert days["20260926"][0] == 0 and days["20260927"][0] == 0  # Saturday, Sunday
    assert all(days[f"202610{day:02d}"][0] == 0 for day in range(1, 8))  # October 1-7
    assert days["20261008"] == (1, "20260930")
    assert days["20260928"] == (1, "20260925")
    new_year = table(market, "trade_cal", {"start_date": "20260101", "end_date": "20260102"})
    assert new_year["items"] == [["SSE", "20260102", 1, "20251231"], ["SSE", "20260101", 0, "20251231"]]
    may_day = table(market, "trade_cal", {"start_date": "20260501", "end_date": "20260501"})
    assert may_day["items"][0][2] == 0  # a Friday


def test_fields_choose_the_columns_and_their_order(market):
    params = {"start_date": "20261031", "end_date": "20261102", "is_open": "1"}
    data = table(market, "trade_cal", params, "is_open, cal_date")
    assert data["fields"] == ["is_open", "cal_date"]
    assert data["items"] == [[1, "20261102"]]  # is_open keeps the open day only
    closed = table(market, "trade_cal", {**params, "is_open": 0}, "cal_date")
    assert closed["items"] == [["20261101"], ["20261031"]]


def test_instruments_by_list_status_and_exchange(market):
    listed = table(market, "stock_basic", {"exchange": "", "list_status": "L"})
    assert listed["fields"] == [
        "ts_code",
        "symbol",
        "name",
        "area",
        "industry",
        "market",
        "list_status",
        "list_date",
        "delist_date",
    ]
    delisted = table(market, "stock_basic", {"list_status": "D"})["items"]
    paused = table(market, "stock_basic", {"list_status": "P"})["items"]
    assert (len(listed["items"]), len(delisted), len(paused)) == (194, 4, 2)
    codes = [item[0] for item in listed["items"] + delisted + paused]
    assert len(set(codes)) == INSTRUMENTS and "600000.SH" in codes and "000001.SZ" in codes
    assert all(item[7] < "20261102" and item[8] is None for item in listed["items"])
    assert all(item[6] == "D" and item[7] < item[8] <= "20261102" for item in delisted)
    shanghai = table(market, "stock_basic", {"exchange": "SSE"}, "ts_code,symbol")["items"]
    assert shanghai and all(code.endswith(".SH") and code[:6] == symbol for code, symbol in shanghai)
    assert table(market, "stock_basic", {}) == listed  # list_status L by default


def test_a_day_has_one_bar_per_instrument_trading_that_day(market):
    data = table(market, "daily", {"trade_date": "20261030"})
    assert data["fields"] == DAILY_FIELDS
    listed = table(market, "stock_basic", {"list_status": "L"}, "ts_code")["items"]
    assert sorted(item[0] for item in data["items"]) == sorted(code for (code,) in listed)
    # Early in 1991 only the instruments listed by then trade.
    everyone = [
        item
        for status in "LDP"
        for item in table(market, "stock_basic", {"list_status": status}, "list_date")["items"]
    ]
    early = table(market, "daily", {"trade_date": "19910301"})["items"]
    assert 0 < len(early) == sum(list_date <= "19910301" for (list_date,) in everyone)


def test_bars_are_consistent_and_deterministic(market):
    first = table(market, "daily", {"trade_date": "20261030"})["items"]
    assert table(market, "daily", {"trade_date": "20261030"})["items"] == first
    with FakeMarket(instruments=INSTRUMENTS, today=TODAY) as other:
        assert table(other, "daily", {"trade_date": "20261030"})["items"] == first
    before = {item[0]: item for item in table(market, "daily", {"trade_date": "20261029"})["items"]}
    for code, day, open_, high, low, close, pre_close, change, pct_chg, vol, amount in first:
        assert day == "20261030"
        assert high >= max(open_, close) and low <= min(open_, close) and low > 0
        assert pre_close == before[code][5]
        assert change == round(close - pre_close, 2)
        assert pct_chg == pytest.approx(change / pre_close * 100, abs=1e-4)
        assert all(isinstance(value, float) for value in (open_, close, vol, amount))
        assert all(round(value, 2) == value for value in (open_, high, low, close, pre_close))


def test_one_instruments_bars_come_newest_first(market):
    data = table(
        market,
        "daily",
        {"ts_code": "600000.SH", "start_date": "20261026", "end_date": "20261103"},
        "trade_date,close",
    )
    assert [day for day, _ in data["items"]] == [
        "20261102",
        "20261030",
        "20261029",
        "20261028",
        "20261027",
        "20261026",
    ]
    on_the_day = table(market, "daily", {"trade_date": "20261028"}, "ts_code,close")["items"]
    assert dict(on_the_day)["600000.SH"] == data["items"][3][1]


@pytest.mark.parametrize(
    "day", ["20261031", "20261001", "20261103"], ids=["saturday", "holiday", "after-today"]
)
def test_no_bars_on_a_closed_day_nor_after_today(market, day):
    data = table(market, "daily", {"trade_date": day})
    assert data["items"] == [] and data["fields"] == DAILY_FIELDS


def test_a_missing_day_is_empty_until_cleared(market):
    market.set_missing_day(date(2026, 10, 30))
    assert table(market, "daily", {"trade_date": "20261030"})["items"] == []
    assert len(table(market, "daily", {"trade_date": "20261029"})["items"]) == 194
    market.clear()
    assert len(table(market, "daily", {"trade_date": "20261030"})["items"]) == 194


def test_the_servers_today_bounds_the_data(market):
    assert table(market, "daily", {"trade_date": "20261103"})["items"] == []
    market.set_today(date(2026, 11, 3))
    assert len(table(market, "daily", {"trade_date": "20261103"})["items"]) == 194
    calendar = table(market, "trade_cal", {"start_date": "20261201"})["items"]
    assert calendar[0][1] == "20261231"  # the calendar runs to the end of today's year


@pytest.mark.parametrize(
    ("api_name", "params", "token", "code", "words"),
    [
        ("daily", {"trade_date": "20261030"}, "wrong", -2001, AUTH_MESSAGE),
        ("daily", {"trade_date": "20261030"}, None, -2001, AUTH_MESSAGE),
        ("weekly", {}, "demo-token", -2002, "weekly"),
        ("daily", {"trade_date": "2026-10-30"}, "demo-token", 40301, "trade_date"),
        ("trade_cal", {"end_date": "20261340"}, "demo-token", 40301, "end_date"),
        ("trade_cal", {"is_open": "yes"}, "demo-token", 40301, "is_open"),
        ("stock_basic", {"list_status": "X"}, "demo-token", 40301, "list_status"),
        ("daily", {}, "demo-token", 40301, "trade_date"),
    ],
)
def test_application_errors_come_with_http_200(market, api_name, params, token, code, words):
    response = post(market, api_name, params, token=token)
    assert response.status_code == 200
    answer = response.json()
    assert (answer["code"], answer["data"]) == (code, None)
    assert words in answer["msg"]
    assert market.calls[api_name] == 1


def test_a_body_that_is_not_json_is_http_400_and_other_methods_405(market):
    response = httpx.post(market.url, content=b"{not json", timeout=5)
    assert response.status_code == 400
    assert response.json()["code"] == 40000 and response.json()["data"] is None
    assert httpx.post(market.url, json=["daily"], timeout=5).status_code == 400
    refused = httpx.get(market.url, timeout=5)
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"
    assert sum(market.calls.values()) == 0


def test_a_timeout_fault_holds_the_request_past_the_clients_timeout(market):
    market.hold_seconds = 0.5
    market.fail("daily", "timeout")
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        post(market, "daily", {"trade_date": "20261030"}, timeout=0.2)
    assert time.monotonic() - started < 0.5
    assert table(market, "daily", {"trade_date": "20261030"})["items"]


@pytest.mark.parametrize("kind", ["500", "503"])
def test_gateway_faults_answer_an_html_page(market, kind):
    market.fail("daily", kind)
    response = post(market, "daily", {"trade_date": "20261030"})
    assert response.status_code == int(kind)
    assert response.headers["content-type"] == "text/html" and "<html>" in response.text
    assert response.headers.get("retry-after") == ("5" if kind == "503" else None)


def test_a_401_fault_answers_the_wrong_token_error(market):
    market.fail("daily", "401")
    response = post(market, "daily", {"trade_date": "20261030"})
    assert response.status_code == 401
    assert response.json()["code"] == -2001 and response.json()["msg"] == AUTH_MESSAGE


def test_rate_limits_come_as_http_429_or_in_the_body(market):
    market.fail("daily", "429")
    market.fail("daily", "rate_limit")
    limited = post(market, "daily", {"trade_date": "20261030"})
    assert limited.status_code == 429 and limited.headers["retry-after"] == "60"
    assert (limited.json()["code"], limited.json()["msg"]) == (40203, RATE_LIMIT_MESSAGE)
    in_body = post(market, "daily", {"trade_date": "20261030"})
    assert in_body.status_code == 200
    assert (in_body.json()["code"], in_body.json()["data"]) == (40203, None)
    assert in_body.json()["msg"] == RATE_LIMIT_MESSAGE


def test_a_reset_fault_drops_the_connection(market):
    market.fail("daily", "reset")
    with pytest.raises(httpx.TransportError):
        post(market, "daily", {"trade_date": "20261030"})
    assert table(market, "daily", {"trade_date": "20261030"})["items"]


def test_faults_are_taken_in_order_each_by_the_next_call_of_its_api(market):
    market.fail("daily", "500", times=2)
    market.fail(None, "503")
    assert post(market, "trade_cal").status_code == 503  # the first fault for any API
    assert post(market, "daily", {"trade_date": "20261030"}).status_code == 500
    assert post(market, "stock_basic").status_code == 200
    assert post(market, "daily", {"trade_date": "20261030"}).status_code == 500
    assert post(market, "daily", {"trade_date": "20261030"}).status_code == 200
    assert market.calls == Counter({"daily": 3, "trade_cal": 1, "stock_basic": 1})
    with pytest.raises(ValueError):
        market.fail("daily", "418")


def test_the_control_endpoint_queues_faults_and_shows_the_state(market):
    control = market.url + "_control"
    state = httpx.post(
        control, json={"action": "fail", "api_name": "daily", "kind": "503", "times": 2}, timeout=5
    ).json()
    assert state["faults"] == [{"api_name": "daily", "kind": "503"}] * 2
    httpx.post(control, json={"action": "hold_seconds", "seconds": 1.5}, timeout=5)
    httpx.post(control, json={"action": "today", "date": "2026-11-03"}, timeout=5)
    httpx.post(control, json={"action": "missing_day", "date": "2026-10-29"}, timeout=5)
    assert post(market, "daily", {"trade_date": "20261103"}).status_code == 503
    state = httpx.get(control, timeout=5).json()
    assert state["faults"] == [{"api_name": "daily", "kind": "503"}]
    assert (state["today"], state["hold_seconds"], state["calls"]) == ("2026-11-03", 1.5, {"daily": 1})
    assert state["missing_days"] == ["2026-10-29"]
    assert httpx.post(control, json={"action": "clear"}, timeout=5).json()["faults"] == []
    assert table(market, "daily", {"trade_date": "20261103"})["items"]
    assert table(market, "daily", {"trade_date": "20261029"})["items"]
    refused = httpx.post(control, json={"action": "fail", "kind": "nope"}, timeout=5)
    assert refused.status_code == 400 and "kind" in refused.json()["error"]


def test_stopping_ends_a_held_request_at_once():
    market = FakeMarket(instruments=10, today=TODAY).start()
    market.fail("daily", "timeout")
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            post(market, "daily", {"trade_date": "20261030"}, timeout=10)
        except httpx.HTTPError as error:
            outcome.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: market.calls["daily"], 5, "the call held by the server")
    started = time.monotonic()
    market.stop()
    caller.join(5)
    assert time.monotonic() - started < 2
    assert len(outcome) == 1 and isinstance(outcome[0], httpx.TransportError)


def test_the_command_serves_until_sigterm():
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devtools.fakes.market_api",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--instruments",
            "50",
            "--today",
            "2026-11-02",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:") and line.endswith("/")
        url = line.removeprefix("listening on ")
        answer = httpx.post(
            url,
            json={"api_name": "daily", "token": "demo-token", "params": {"trade_date": "20261030"}},
            timeout=5,
        ).json()
        assert answer["code"] == 0 and len(answer["data"]["items"]) == 48
        process.send_signal(signal.SIGTERM)
        assert process.wait(5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
