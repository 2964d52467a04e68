"""A fake market-data API that speaks the Tushare Pro HTTP protocol, for the tests, the
benchmark and the demo. It is the one fake at the edge of the world, so it answers as the
real API does, its failures included.

    python -m devtools.fakes.market_api [--host 127.0.0.1] [--port 0] [--instruments 5000]
                                        [--token demo-token] [--today YYYY-MM-DD]

prints ``listening on http://HOST:PORT/`` and serves until SIGTERM or SIGINT.

Protocol. ``POST /`` with a JSON body ``{"api_name", "token", "params", "fields"}``
(``fields`` comma separated; empty or missing means all of the API's fields in their
default order; unknown names are ignored). The answer is HTTP 200 ``{"request_id",
"code": 0, "msg": "", "data": {"fields", "items", "has_more": false}}``, each item in the
order of ``fields``. Application errors are HTTP 200 with ``data: null`` and a code:
-2001 a wrong token, -2002 an unknown ``api_name``, 40301 a bad parameter, 40203 a rate
limit. A body that is not a JSON object is HTTP 400 (code 40000); a method other than
POST is 405.

APIs, each answering as of the server's today (the date in Shanghai unless set):

- ``trade_cal`` (``exchange``, ``start_date``, ``end_date``, ``is_open``): the calendar
  from 1990-12-19 (the exchange's first day) to December 31 of today's year, newest
  first. Monday to Friday are open except January 1, May 1-3 and October 1-7 of every
  year; every exchange shares it.
- ``stock_basic`` (``exchange``, ``list_status``): N instruments, alternately ``6000xx.SH``
  and ``0000xx.SZ``, listed on open days from 1991 on (a higher number later). One in 50
  is delisted and one in 100 paused, on a day before July 2025. The list is as of today:
  an instrument appears once listed, and is ``L`` until its delisting or pause date.
- ``daily`` (``trade_date``, or ``ts_code`` with ``start_date``/``end_date``): one bar
  per instrument trading that day (listed, not yet delisted or paused). Prices come from
  a hash of the code and the day; a close is within 4.5% of the instrument's base price
  (a day moves less than the exchange's 10% limit) and ``pre_close`` is the previous
  open day's close. A closed day, a day after today and
  a day set missing (not yet published) give an empty table. A day's bars are built
  once and cached (5,000 in about 30 ms).

Faults (``FakeMarket.fail`` or ``POST /_control``) queue up, each for the next call, of
any API or of one: ``timeout`` (held ``hold_seconds`` without an answer, then closed),
``500`` (an HTML gateway page), ``503`` (``Retry-After: 5``), ``401`` (code -2001),
``429`` (``Retry-After: 60``, code 40203), ``rate_limit`` (HTTP 200, code 40203) and
``reset`` (the connection reset, no answer). ``POST /_control`` takes ``{"action":
"fail", "api_name", "kind", "times"}``, ``{"action": "clear"}``, ``{"action": "today",
"date"}``, ``{"action": "hold_seconds", "seconds"}`` or ``{"action": "missing_day",
"date"}``; ``GET /_control`` shows the state: faults queued, today, calls per API.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import socket
import struct
import sys
import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

AUTH_MESSAGE = "您的token不对，请确认。"
RATE_LIMIT_MESSAGE = (
    "抱歉，您每分钟最多访问该接口500次，权限的具体详情访问：https://tushare.pro/document/1?doc_id=108。"
)
FAULT_KINDS = ("timeout", "500", "503", "401", "429", "rate_limit", "reset")
FIRST_DAY = date(1990, 12, 19)
MARKET_TIMEZONE = ZoneInfo("Asia/Shanghai")
EXCHANGES = frozenset({"SSE", "SZSE", "BSE", "CFFEX", "SHFE", "CZCE", "DCE", "INE"})
MAX_BODY = 1 << 20

_ONE_DAY = timedelta(days=1)
_HOLIDAYS = frozenset({(1, 1), (5, 1), (5, 2), (5, 3)} | {(10, day) for day in range(1, 8)})
_API_DATE = re.compile(r"^\d{8}$")
_GATEWAY_PAGE = (
    "<html>\r\n<head><title>{status}</title></head>\r\n<body>\r\n<center><h1>"
    "{status}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)


# The calendar.


def is_open(day: date) -> bool:
    return day >= FIRST_DAY and day.weekday() < 5 and (day.month, day.day) not in _HOLIDAYS


def previous_open(day: date) -> date | None:
    day -= _ONE_DAY
    while day >= FIRST_DAY:
        if is_open(day):
            return day
        day -= _ONE_DAY
    return None


def next_open(day: date) -> date:
    while not is_open(day):
        day += _ONE_DAY
    return day


def api_date(day: date | None) -> str | None:
    return day.strftime("%Y%m%d") if day else None


# The instruments and their bars.

_SYLLABLES = (
    "Hua",
    "Xin",
    "Zhong",
    "Guo",
    "Tian",
    "Hai",
    "Jin",
    "Long",
    "Feng",
    "Kang",
    "Ming",
    "Sheng",
    "Tai",
    "Xing",
    "Yuan",
    "Da",
    "Heng",
    "Rui",
    "Chang",
    "An",
)
_KINDS = ("Gufen", "Keji", "Yinhang", "Yaoye", "Dianqi", "Huagong", "Dichan", "Nengyuan")
_AREAS = (
    "Shanghai",
    "Beijing",
    "Guangdong",
    "Zhejiang",
    "Jiangsu",
    "Shandong",
    "Sichuan",
    "Fujian",
    "Hubei",
    "Hunan",
    "Anhui",
    "Henan",
)
_INDUSTRIES = (
    "Bank",
    "Steel",
    "Chemicals",
    "Software",
    "Pharmaceuticals",
    "Real Estate",
    "Autos",
    "Electrical Equipment",
    "Food & Beverage",
    "Utilities",
    "Insurance",
    "Semiconductors",
)
_LAST_STOP = date(2025, 6, 30)


def _hash(data: bytes) -> tuple[int, int, int, int]:
    return struct.unpack("<4I", hashlib.blake2b(data, digest_size=16).digest())


def _day_key(day: date) -> bytes:
    return day.toordinal().to_bytes(4, "little")


@dataclass(frozen=True, slots=True)
class Instrument:
    ts_code: str
    name: str
    area: str
    industry: str
    list_date: date
    status: str  # what it becomes on ``stop``: "D" delisted, "P" paused; "L" never stops
    stop: date | None
    base: int  # the price its closes wander around, in cents
    key: bytes  # its part of its bars' hashes

    def trades_on(self, day: date) -> bool:
        return self.list_date <= day and (self.stop is None or day < self.stop)

    def as_of(self, today: date) -> tuple[str, date | None]:
        """Its list status and delist date on ``today`` (listed by then)."""
        if self.stop is None or today < self.stop:
            return "L", None
        return self.status, self.stop if self.status == "D" else None


def instrument(index: int) -> Instrument:
    h = _hash(f"instrument {index}".encode())
    code = f"{600000 + index // 2}.SH" if index % 2 == 0 else f"{index // 2 + 1:06d}.SZ"
    listed = next_open(date(1991, 1, 2) + timedelta(days=(index * 7 // 3) % 12000))
    status = "D" if index % 50 == 17 else "P" if index % 100 == 33 else "L"
    stop = None
    if status != "L":
        span = max(1, (_LAST_STOP - listed).days - 365)
        stop = next_open(listed + timedelta(days=365 + h[3] % span))
    name = f"{_SYLLABLES[h[0] % 20]}{_SYLLABLES[h[0] // 20 % 20].lower()} {_KINDS[h[0] // 400 % len(_KINDS)]}"
    return Instrument(
        code,
        name,
        _AREAS[h[1] % len(_AREAS)],
        _INDUSTRIES[h[2] % len(_INDUSTRIES)],
        listed,
        status,
        stop,
        300 + h[3] % 9700,
        f"{code} ".encode(),
    )


def _close(item: Instrument, day_key: bytes) -> int:
    return item.base * (955_000 + (_hash(item.key + day_key)[0] * 90_000 >> 32)) // 1_000_000


def bars(items: Iterable[Instrument], day: date) -> list[tuple[Any, ...]]:
    """The bars on open ``day`` of those ``items`` trading then, each in ``daily``'s
    default field order. Prices are worked out in cents (vol in hundredths of a lot of
    100 shares, amount in yuan), then written as the API does: yuan with 2 decimals,
    amount in thousands of yuan with 3."""
    trade_date, key = api_date(day), _day_key(day)
    previous = previous_open(day)
    previous_key = _day_key(previous) if previous else b""
    rows = []
    for item in items:
        if not item.trades_on(day):
            continue
        h0, h1, h2, h3 = _hash(item.key + key)
        close = item.base * (955_000 + (h0 * 90_000 >> 32)) // 1_000_000
        pre_close = _close(item, previous_key) if previous and previous >= item.list_date else item.base
        open_ = pre_close * (980_000 + (h1 * 40_000 >> 32)) // 1_000_000
        top, bottom = max(open_, close), min(open_, close)
        high = top + top * (h2 * 20_000 >> 32) // 1_000_000
        low = bottom - bottom * (h3 * 20_000 >> 32) // 1_000_000
        change = close - pre_close
        vol = 100_000 + ((h1 ^ h2) * 50_000_000 >> 32)
        rows.append(
            (
                item.ts_code,
                trade_date,
                open_ / 100,
                high / 100,
                low / 100,
                close / 100,
                pre_close / 100,
                change / 100,
                round(change * 1_000_000 / pre_close) / 10_000,
                vol / 100,
                vol * (open_ + close) // 200 / 1000,
            )
        )
    return rows


class World:
    """The instruments, by code, and their bars, a day's cached: a day of 5,000 is asked
    for again and again (gap-fills, reloads)."""

    def __init__(self, count: int) -> None:
        self.instruments = sorted((instrument(i) for i in range(count)), key=lambda item: item.ts_code)
        self.by_code = {item.ts_code: item for item in self.instruments}
        self.day = lru_cache(maxsize=32)(lambda day: bars(self.instruments, day))


# The APIs.


class ApiError(Exception):
    def __init__(self, code: int, msg: str) -> None:
        super().__init__(msg)
        self.code, self.msg = code, msg


def _text(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ApiError(40301, f"参数 {name} 不对：{value}")
    return value


def _date(params: dict[str, Any], name: str) -> date | None:
    value = _text(params, name)
    if value is None:
        return None
    try:
        if not _API_DATE.match(value):
            raise ValueError(value)
        return datetime.strptime(value, "%Y%m%d").date()
    except ValueError:
        raise ApiError(40301, f"参数 {name} 不对：{value}，应为 YYYYMMDD 格式的日期。") from None


def _choice(params: dict[str, Any], name: str, allowed: tuple[str, ...], default: str | None) -> str | None:
    value = _text(params, name)
    if value is None:
        return default
    if value not in allowed:
        raise ApiError(40301, f"参数 {name} 不对：{value}，应为 {'、'.join(allowed)} 之一。")
    return value


def trade_cal(market: FakeMarket, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    exchange = _text(params, "exchange") or "SSE"
    start = max(_date(params, "start_date") or FIRST_DAY, FIRST_DAY)
    today = market.today
    end = min(_date(params, "end_date") or date(today.year, 12, 31), date(today.year, 12, 31))
    wanted = _choice(params, "is_open", ("0", "1"), None)
    if exchange not in EXCHANGES:
        return []
    rows, previous, day = [], previous_open(start), start
    while day <= end:
        flag = int(is_open(day))
        if wanted is None or int(wanted) == flag:
            rows.append((exchange, api_date(day), flag, api_date(previous)))
        if flag:
            previous = day
        day += _ONE_DAY
    rows.reverse()
    return rows


def stock_basic(market: FakeMarket, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    exchange = _text(params, "exchange")
    wanted = _choice(params, "list_status", ("L", "D", "P"), "L")
    suffix = {None: "", "SSE": ".SH", "SZSE": ".SZ"}.get(exchange)
    if suffix is None:
        return []
    today, rows = market.today, []
    for item in market.world.instruments:
        if item.list_date > today or not item.ts_code.endswith(suffix):
            continue
        status, delisted = item.as_of(today)
        if status == wanted:
            rows.append(
                (
                    item.ts_code,
                    item.ts_code[:6],
                    item.name,
                    item.area,
                    item.industry,
                    "主板",
                    status,
                    api_date(item.list_date),
                    api_date(delisted),
                )
            )
    return rows


def daily(market: FakeMarket, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    trade_date = _date(params, "trade_date")
    codes = _text(params, "ts_code")
    start, end = _date(params, "start_date"), _date(params, "end_date")
    if trade_date is None and codes is None:
        raise ApiError(40301, "参数 trade_date 和 ts_code 至少要有一个。")
    today, missing, world = market.today, market.missing_days(), market.world

    def published(day: date) -> bool:
        return day <= today and day not in missing and is_open(day)

    if codes is None:
        return world.day(trade_date) if published(trade_date) else []
    items = [world.by_code[code] for code in codes.split(",") if code in world.by_code]
    first = trade_date or max(start or FIRST_DAY, FIRST_DAY)
    last = min(trade_date or end or today, today)
    rows = []
    day = last
    while day >= first:
        if published(day):
            rows.extend(bars(items, day))
        day -= _ONE_DAY
    return rows


@dataclass(frozen=True)
class Api:
    fields: tuple[str, ...]
    rows: Callable[[FakeMarket, dict[str, Any]], list[tuple[Any, ...]]]


APIS = {
    "trade_cal": Api(("exchange", "cal_date", "is_open", "pretrade_date"), trade_cal),
    "stock_basic": Api(
        (
            "ts_code",
            "symbol",
            "name",
            "area",
            "industry",
            "market",
            "list_status",
            "list_date",
            "delist_date",
        ),
        stock_basic,
    ),
    "daily": Api(
        (
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
        ),
        daily,
    ),
}


def _answer(code: int, msg: str, data: dict[str, Any] | None) -> dict[str, Any]:
    return {"request_id": uuid.uuid4().hex, "code": code, "msg": msg, "data": data}


# The server.


@dataclass(frozen=True)
class Fault:
    api_name: str | None  # None: whichever API is called next
    kind: str


class FakeMarket:
    """The fake API's state, and its server on a thread of its own while started (or in a
    ``with`` block). ``calls`` counts every call received per ``api_name``, failed ones
    too; ``hold_seconds`` is how long a ``timeout`` fault holds its request."""

    def __init__(
        self,
        token: str = "demo-token",
        instruments: int = 5000,
        today: date | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        hold_seconds: float = 30.0,
    ) -> None:
        if not 0 <= instruments <= 100_000:
            raise ValueError(f"instruments must be 0 to 100,000, not {instruments}")
        self.token = token
        self.hold_seconds = hold_seconds
        self.calls: Counter[str] = Counter()
        self.world = World(instruments)
        self._today = today
        self._faults: deque[Fault] = deque()
        self._missing: set[date] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._address = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def today(self) -> date:
        """The set date, else the date in Shanghai: the provider publishes by its market's
        calendar, a day ahead of UTC for the evening hours there."""
        return self._today or datetime.now(MARKET_TIMEZONE).date()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake market-data API is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> FakeMarket:
        self._stopping.clear()
        self._server = _Server(self._address, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-market-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; a held request ends now, and so do idle kept-alive connections."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeMarket:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail(self, api_name: str | None, kind: str, times: int = 1) -> None:
        """The next ``times`` calls of ``api_name`` (of any API if None) fail as ``kind``,
        after the faults queued before them."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}, not {kind!r}")
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise ValueError(f"times must be a positive integer, not {times!r}")
        with self._lock:
            self._faults.extend([Fault(api_name, kind)] * times)

    def clear(self) -> None:
        """No fault queued and no day missing."""
        with self._lock:
            self._faults.clear()
            self._missing.clear()

    def set_today(self, day: date | None) -> None:
        """The server's today; None for the real date in Shanghai."""
        self._today = day

    def set_missing_day(self, day: date) -> None:
        """``daily`` for ``day`` answers an empty table, as when not yet published."""
        with self._lock:
            self._missing.add(day)

    def missing_days(self) -> frozenset[date]:
        with self._lock:
            return frozenset(self._missing)

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "today": self.today.isoformat(),
                "clock": "real" if self._today is None else "set",
                "hold_seconds": self.hold_seconds,
                "faults": [{"api_name": f.api_name, "kind": f.kind} for f in self._faults],
                "missing_days": sorted(day.isoformat() for day in self._missing),
                "calls": dict(self.calls),
                "instruments": len(self.world.instruments),
            }

    def receive(self, api_name: str) -> Fault | None:
        """Count a call; the first fault queued for it, taken off the queue."""
        with self._lock:
            self.calls[api_name] += 1
            for fault in self._faults:
                if fault.api_name in (None, api_name):
                    self._faults.remove(fault)
                    return fault
        return None

    def answer(self, api_name: str, token: str | None, params: dict[str, Any], fields: str) -> dict[str, Any]:
        """A call's answer, as the body of HTTP 200."""
        api = APIS.get(api_name)
        try:
            if token != self.token:
                raise ApiError(-2001, AUTH_MESSAGE)
            if api is None:
                raise ApiError(-2002, f"接口名 {api_name} 不存在，请指定正确的接口名。")
            rows = api.rows(self, params)
        except ApiError as error:
            return _answer(error.code, error.msg, None)
        names = [name for name in (part.strip() for part in fields.split(",")) if name in api.fields] or list(
            api.fields
        )
        if names == list(api.fields):
            items = [list(row) for row in rows]
        else:
            positions = [api.fields.index(name) for name in names]
            items = [[row[i] for i in positions] for row in rows]
        return _answer(0, "", {"fields": names, "items": items, "has_more": False})

    def wait_held(self) -> None:
        self._stopping.wait(self.hold_seconds)

    def control(self, command: Any) -> dict[str, Any]:
        """``POST /_control``: the state after ``command``, or ``ValueError``."""
        if not isinstance(command, dict):
            raise ValueError("the body must be a JSON object")
        action = command.get("action")
        if action == "fail":
            if not isinstance(command.get("api_name"), str | None):
                raise ValueError("api_name must be a string or null")
            self.fail(command.get("api_name"), command.get("kind"), command.get("times", 1))
        elif action == "clear":
            self.clear()
        elif action == "today":
            value = command.get("date")
            self.set_today(None if value is None else date.fromisoformat(value))
        elif action == "hold_seconds":
            seconds = command.get("seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
                raise ValueError(f"seconds must be a number of at least 0, not {seconds!r}")
            self.hold_seconds = float(seconds)
        elif action == "missing_day":
            self.set_missing_day(date.fromisoformat(command.get("date")))
        else:
            raise ValueError(f"unknown action {action!r}")
        return self.state()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], market: FakeMarket) -> None:
        super().__init__(address, _Handler)
        self.market = market
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client gone is no error of ours
            super().handle_error(request, client_address)


class BadRequest(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nginx"
    sys_version = ""
    timeout = 120  # an idle kept-alive connection is closed after this
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if urlsplit(self.path).path == "/_control":
            self._json(200, self.server.market.state())
        else:
            self._not_allowed()

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path not in ("/", "/_control"):
            self.close_connection = True
            self._send(404, _GATEWAY_PAGE.format(status="404 Not Found").encode(), "text/html")
            return
        try:
            body = self._body()
        except BadRequest as error:
            self._json(400, _answer(40000, f"请求不对：{error}", None))
            return
        if path == "/_control":
            self._control(body)
        else:
            self._call(body)

    def do_HEAD(self) -> None:
        self._not_allowed()

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD

    def _not_allowed(self) -> None:
        self.close_connection = True  # any body it came with is left unread
        self._send(
            405, _GATEWAY_PAGE.format(status="405 Not Allowed").encode(), "text/html", {"Allow": "POST"}
        )

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise BadRequest("no Content-Length") from None
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            raise BadRequest(f"the body must be 0 to {MAX_BODY} bytes")
        try:
            return json.loads(self.rfile.read(length))
        except ValueError as error:
            raise BadRequest(f"the body is not JSON ({error})") from None

    def _call(self, body: Any) -> None:
        if not isinstance(body, dict):
            self._json(400, _answer(40000, "请求不对：the body must be a JSON object", None))
            return
        api_name, token = body.get("api_name"), body.get("token")
        params, fields = body.get("params") or {}, body.get("fields") or ""
        if (
            not isinstance(api_name, str | None)
            or not isinstance(params, dict)
            or not isinstance(fields, str)
        ):
            self._json(
                400, _answer(40000, "请求不对：api_name and fields must be strings, params an object", None)
            )
            return
        api_name = api_name or ""
        market = self.server.market
        fault = market.receive(api_name)
        if fault is None:
            self._json(200, market.answer(api_name, token, params, fields))
        else:
            self._fail(fault.kind)

    def _fail(self, kind: str) -> None:
        if kind == "timeout":
            self.server.market.wait_held()
            self.close_connection = True
        elif kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
        elif kind in ("500", "503"):
            status = "500 Internal Server Error" if kind == "500" else "503 Service Temporarily Unavailable"
            self._send(
                int(kind),
                _GATEWAY_PAGE.format(status=status).encode(),
                "text/html",
                {"Retry-After": "5"} if kind == "503" else {},
            )
        elif kind == "401":
            self._json(401, _answer(-2001, AUTH_MESSAGE, None))
        elif kind == "429":
            self._json(429, _answer(40203, RATE_LIMIT_MESSAGE, None), {"Retry-After": "60"})
        else:
            self._json(200, _answer(40203, RATE_LIMIT_MESSAGE, None))

    def _control(self, body: Any) -> None:
        try:
            state = self.server.market.control(body)
        except (ValueError, TypeError) as error:
            self._json(400, {"error": str(error)})
        else:
            self._json(200, state)

    def _json(self, status: int, answer: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        body = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
        self._send(status, body, "application/json", headers or {})

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.fakes.market_api", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (the default): a free port")
    parser.add_argument("--instruments", type=int, default=5000)
    parser.add_argument("--token", default="demo-token")
    parser.add_argument(
        "--today",
        type=date.fromisoformat,
        default=None,
        help="YYYY-MM-DD (default: the real date in Shanghai)",
    )
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    with FakeMarket(args.token, args.instruments, args.today, host=args.host, port=args.port) as market:
        print(f"listening on {market.url}", flush=True)
        stopping.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
