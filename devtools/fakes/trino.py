"""A fake Trino coordinator that speaks the client REST protocol and runs the SQL on DuckDB,
for the tests, the benchmark and local trials. It is the one fake at the edge of the
world for exports, so it answers as Trino does, its failures included.

    python -m devtools.fakes.trino [--host 127.0.0.1] [--port 0]

prints ``listening on http://HOST:PORT/`` and serves until SIGTERM or SIGINT.

Protocol (what the official ``trino`` client uses):

- ``POST /v1/statement`` with the SQL as the body → a QueryResults object: ``id``
  (``20261126_101010_00001_fake1``), ``infoUri``, ``nextUri``, ``stats.state`` QUEUED.
- ``GET`` of a ``nextUri`` → the next QueryResults: RUNNING without data while the
  query waits (``slow_polls``, ``hold()``), then pages of at most ``page_rows`` rows with
  ``columns`` (``name``, ``type``, ``typeSignature``) and ``data`` encoded as Trino does
  (decimals, dates and timestamps as strings, ``2026-11-02 09:00:00.000000 UTC``), the
  last one FINISHED without ``nextUri``. A failed query answers ``error`` (``message``,
  ``errorCode``, ``errorName``, ``errorType``, ``failureInfo``) and state FAILED. The
  current page's URI can be fetched again; an older one, or any of a query that has
  ended and been read, is 410 Gone.
- ``GET /v1/query/{id}`` → a QueryInfo: ``queryId``, ``state``, and for a failed query
  ``errorCode`` and ``failureInfo``; 404 for an unknown id.
- ``DELETE`` of a ``nextUri`` or of ``/v1/query/{id}`` cancels: the query is FAILED
  with ``USER_CANCELED``; 204.

SQL runs on an in-memory DuckDB database (``load_table`` fills it). A leading
``catalog.schema.`` on a table name is not understood: name tables as DuckDB does. What
Trino refuses, the fake refuses with Trino's error (``errorName``, ``errorType``,
``errorCode``, and ``errorLocation`` with the ``line L:C:`` that starts the message): a
request holds one statement, so a semicolon outside a literal is a ``SYNTAX_ERROR``
(``mismatched input ';'``); DuckDB's own statements (``COPY``, ``ATTACH``, ``INSTALL``,
``LOAD``, ``PRAGMA``, ``EXPORT``, ``SET`` of a DuckDB setting …) and a file named in
place of a table are syntax errors too; DuckDB's functions that read files or hosts
(``read_csv``, ``read_parquet``, ``read_json``, ``read_text``, ``read_blob``, ``glob``
…) or run SQL held in a string (``query``) are ``FUNCTION_NOT_FOUND``, as Trino has
none of them. Whatever slips past those names, DuckDB cannot reach the host's files:
its external access is off and its configuration locked from the start.

``EXECUTE IMMEDIATE '<statement>' USING <literals>`` (what the client sends for a query
with parameters) runs the statement with its ``?`` bound to the values, their count
checked (``INVALID_PARAMETER_USAGE``). Starburst's server-side
unload, ``SELECT * FROM TABLE(system.unload(input => TABLE(<query>), location =>
<url>, format => 'PARQUET'))``, its location and format literals or parameters, runs
the inner query and writes its rows as a Parquet file into the location through
``exports.parquet`` (local folders and fsspec URLs, with the server's
``storage_options``), answering one row ``(path varchar, count bigint)``; the query
keeps the location (``Query.location``). With ``unload_available=False`` it fails as
Trino does for a missing table function: ``FUNCTION_NOT_FOUND``.

Switches (attributes and methods, or ``POST /_control`` with ``{"action": …}``):
``cold_start_queries`` / ``cold_start_seconds`` (the next N submissions are answered
only after that many seconds, longer than a client's timeout); ``slow_polls`` (every
query stays RUNNING for that many polls); ``hold()`` / ``release()`` (new queries stay
RUNNING until released; a released unload writes its files at once, polled or not);
``fail_next(error_name, error_type, message, times)``; ``http_error_next(status,
times)`` (503 and the like, for the next requests of any kind). Every request's headers
are kept on its query (``queries``), for tests to check the role, tags and source.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import itertools
import json
import math
import re
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import duckdb
import pyarrow as pa

_ARGUMENT = r"(?:'(?P<{0}>(?:[^']|'')*)'|(?P<{0}_parameter>\?))"
UNLOAD = re.compile(
    r"^\s*SELECT\s+\*\s+FROM\s+TABLE\s*\(\s*system\.unload\s*\(\s*input\s*=>\s*TABLE\s*\((?P<query>.*)\)"
    rf"\s*,\s*location\s*=>\s*{_ARGUMENT.format('location')}"
    rf"\s*,\s*format\s*=>\s*{_ARGUMENT.format('format')}\s*\)\s*\)\s*$",
    re.IGNORECASE | re.DOTALL,
)
EXECUTE_IMMEDIATE = re.compile(
    r"^\s*EXECUTE\s+IMMEDIATE\s+'(?P<statement>(?:[^']|'')*)'\s*(?:USING\s+(?P<values>.*?))?\s*$",
    re.IGNORECASE | re.DOTALL,
)
LITERAL = re.compile(
    r"\s*(?:'(?P<text>(?:[^']|'')*)'|(?P<number>-?\d+)|(?P<null>NULL))\s*(?:,|$)", re.IGNORECASE
)
MAX_BODY = 1 << 20
# The tokens of a statement: blanks and comments, literals, quoted identifiers, words.
TOKEN = re.compile(
    r"""(?P<blank>\s+|--[^\n]*|/\*.*?(?:\*/|\Z))
    |(?P<string>'(?:[^']|'')*'?)
    |(?P<quoted>"(?:[^"]|"")*"?)
    |(?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    |(?P<symbol>.)""",
    re.VERBOSE | re.DOTALL,
)
# DuckDB's functions that read files or hosts, or run SQL held in a string (where a
# reader's name would not show): Trino has none of them.
HOST_FUNCTIONS = frozenset(
    {
        "read_csv",
        "read_csv_auto",
        "sniff_csv",
        "read_parquet",
        "parquet_scan",
        "parquet_metadata",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "parquet_schema",
        "read_json",
        "read_json_auto",
        "read_json_objects",
        "read_json_objects_auto",
        "read_ndjson",
        "read_ndjson_auto",
        "read_ndjson_objects",
        "read_text",
        "read_blob",
        "read_xlsx",
        "glob",
        "iceberg_scan",
        "iceberg_metadata",
        "iceberg_snapshots",
        "delta_scan",
        "sqlite_scan",
        "sqlite_attach",
        "postgres_scan",
        "postgres_attach",
        "postgres_query",
        "mysql_scan",
        "query",
        "query_table",
        "json_execute_serialized_sql",
        "getenv",
    }
)
# DuckDB's statements that Trino's grammar has no room for.
DUCKDB_STATEMENTS = frozenset(
    {
        "attach",
        "detach",
        "copy",
        "install",
        "load",
        "force",
        "pragma",
        "export",
        "import",
        "checkpoint",
        "vacuum",
        "summarize",
        "pivot",
        "unpivot",
        "from",
    }
)
# What Trino's SET is followed by; anything else is one of DuckDB's settings.
TRINO_SET = frozenset({"session", "role", "path", "time"})
STATEMENT_STARTS = (
    "'ALTER', 'ANALYZE', 'CALL', 'COMMENT', 'COMMIT', 'CREATE', 'DEALLOCATE', 'DELETE', 'DENY', "
    "'DESC', 'DESCRIBE', 'DROP', 'EXECUTE', 'EXPLAIN', 'GRANT', 'INSERT', 'MERGE', 'PREPARE', "
    "'REFRESH', 'RESET', 'REVOKE', 'ROLLBACK', 'SET', 'SHOW', 'START', 'TRUNCATE', 'UPDATE', "
    "'USE', <query>"
)


# Trino's codes (io.trino.spi.StandardErrorCode) for the errors the fake makes itself;
# others get the first code of their type.
ERROR_CODES = {
    "GENERIC_USER_ERROR": 0,
    "SYNTAX_ERROR": 1,
    "USER_CANCELED": 3,
    "FUNCTION_NOT_FOUND": 6,
    "INVALID_FUNCTION_ARGUMENT": 7,
}
TYPE_CODES = {
    "USER_ERROR": 0,
    "INTERNAL_ERROR": 65536,
    "INSUFFICIENT_RESOURCES": 131072,
    "EXTERNAL": 16777216,
}


@dataclass
class Query:
    id: str
    sql: str
    headers: dict[str, str]
    state: str = "QUEUED"
    polls: int = 0
    held: bool = False
    error: dict[str, Any] | None = None
    token: int = 0
    pages: dict[int, dict[str, Any]] = field(default_factory=dict)
    reader: Any = None
    columns: list[dict[str, Any]] | None = None
    unload_rows: list[list[Any]] | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    read_out: bool = False  # its last page was served
    # The statement run and the values bound to its parameters (EXECUTE IMMEDIATE).
    statement: str = ""
    parameters: list[Any] = field(default_factory=list)
    # An unload's: the inner query, and where and how it writes.
    unload_query: str = ""
    location: str = ""
    unload_format: str = ""


def _outside_literals(sql: str) -> list[int]:
    """Offsets of the characters of ``sql`` outside string literals, quoted identifiers
    and comments: where a ``;`` ends a statement and a ``?`` is a parameter."""
    found, index, length = [], 0, len(sql)
    while index < length:
        char = sql[index]
        if char in "'\"":
            end = index + 1
            while end < length:
                if sql[end] == char and sql[end + 1 : end + 2] == char:
                    end += 2
                elif sql[end] == char:
                    break
                else:
                    end += 1
            index = end + 1
        elif sql.startswith("--", index):
            newline = sql.find("\n", index)
            index = length if newline < 0 else newline + 1
        elif sql.startswith("/*", index):
            close = sql.find("*/", index + 2)
            index = length if close < 0 else close + 2
        else:
            found.append(index)
            index += 1
    return found


def read_request(sql: str) -> tuple[str, list[Any]]:
    """The statement a request runs and its parameters' values, as Trino reads them; a
    ``_Failed`` for what Trino refuses (several statements, DuckDB's own statements and
    functions, a parameter count that is not the statement's)."""
    _one_statement(sql)
    match = EXECUTE_IMMEDIATE.match(sql)
    if match is None:
        _trino_only(sql)
        return sql, []
    statement = match["statement"].replace("''", "'")
    _one_statement(statement)
    _trino_only(statement)
    values = _literals(match["values"] or "")
    wanted = sum(1 for index in _outside_literals(statement) if statement[index] == "?")
    if wanted != len(values):
        raise _Failed(
            "INVALID_PARAMETER_USAGE",
            "USER_ERROR",
            f"Incorrect number of parameters: expected {wanted} but found {len(values)}",
        )
    return statement, values


def _one_statement(sql: str) -> None:
    for index in _outside_literals(sql):
        if sql[index] == ";":
            raise _Failed.at(sql, index, "SYNTAX_ERROR", "mismatched input ';'. Expecting: <EOF>")


def _tokens(sql: str) -> list[tuple[str, str, int]]:
    """``(kind, text, offset)`` of each token but blanks and comments; a quoted
    identifier's text is its name."""
    found = []
    for match in TOKEN.finditer(sql):
        kind = match.lastgroup or "symbol"
        if kind == "quoted":
            found.append(("word", match[0].strip('"').replace('""', '"'), match.start()))
        elif kind != "blank":
            found.append((kind, match[0], match.start()))
    return found


def _trino_only(sql: str) -> None:
    """Refuse, as Trino would, what only DuckDB understands: its statements, a file in
    place of a table, and its functions that reach files, hosts or SQL in a string."""
    tokens = _tokens(sql)
    if tokens and tokens[0][0] == "word":
        first = tokens[0][1].lower()
        refused = tokens[0] if first in DUCKDB_STATEMENTS else None
        if first == "set" and len(tokens) > 1 and tokens[1][1].lower() not in TRINO_SET:
            refused = tokens[1]
        if refused is not None:
            message = f"mismatched input '{refused[1]}'. Expecting: {STATEMENT_STARTS}"
            raise _Failed.at(sql, refused[2], "SYNTAX_ERROR", message)
    for (kind, text, offset), (next_kind, next_text, next_offset) in itertools.pairwise(tokens):
        if kind == "word" and text.lower() in ("from", "join") and next_kind == "string":
            message = f"mismatched input '{next_text}'. Expecting: '(', 'LATERAL', 'UNNEST', <identifier>"
            raise _Failed.at(sql, next_offset, "SYNTAX_ERROR", message)
        if kind == "word" and next_text == "(" and text.lower() in HOST_FUNCTIONS:
            raise _Failed.at(sql, offset, "FUNCTION_NOT_FOUND", f"Function '{text}' not registered")


def _literals(text: str) -> list[Any]:
    values, position = [], 0
    while position < len(text):
        match = LITERAL.match(text, position)
        if match is None or match.end() == position:
            raise _Failed(
                "SYNTAX_ERROR",
                "USER_ERROR",
                f"line 1:1: mismatched input in USING: {text[position : position + 40]!r}",
            )
        if match["text"] is not None:
            values.append(match["text"].replace("''", "'"))
        elif match["number"] is not None:
            values.append(int(match["number"]))
        else:
            values.append(None)
        position = match.end()
    return values


def trino_type(arrow: pa.DataType) -> tuple[str, dict[str, Any]]:
    """Trino's name and type signature for an Arrow type of DuckDB's answer."""

    def signature(raw: str, *args: int) -> dict[str, Any]:
        return {"rawType": raw, "arguments": [{"kind": "LONG", "value": a} for a in args]}

    if pa.types.is_boolean(arrow):
        return "boolean", signature("boolean")
    for check, name in (
        (pa.types.is_int8, "tinyint"),
        (pa.types.is_int16, "smallint"),
        (pa.types.is_int32, "integer"),
        (pa.types.is_int64, "bigint"),
        (pa.types.is_float32, "real"),
        (pa.types.is_float64, "double"),
        (pa.types.is_date32, "date"),
    ):
        if check(arrow):
            return name, signature(name)
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})", signature("decimal", arrow.precision, arrow.scale)
    if pa.types.is_timestamp(arrow):
        raw = "timestamp with time zone" if arrow.tz else "timestamp"
        return raw.replace("timestamp", "timestamp(6)", 1), signature(raw, 6)
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return "varbinary", signature("varbinary")
    return "varchar", signature("varchar", 2147483647)


def encode(value: Any, type_name: str) -> Any:
    """A value as Trino puts it in ``data``."""
    if value is None:
        return None
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        text = value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
        return text.strftime("%Y-%m-%d %H:%M:%S.%f") + (" UTC" if "zone" in type_name else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode()
    return str(value)


class FakeTrino:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        page_rows: int = 10_000,
        unload_available: bool = True,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.page_rows = page_rows
        self.unload_available = unload_available
        self.storage_options = dict(storage_options or {})
        self.cold_start_queries = 0
        self.cold_start_seconds = 0.0
        self.slow_polls = 0
        self.holding = False
        self.queries: dict[str, Query] = {}
        # Trino reads catalogs, never the coordinator's files: neither does the fake, nor
        # can a query set it back to reading them (its own tables come from Arrow).
        self.duckdb = duckdb.connect(
            ":memory:", config={"enable_external_access": False, "lock_configuration": True}
        )
        self._lock = threading.RLock()
        self._failures: deque[dict[str, Any]] = deque()
        self._http_errors: deque[int] = deque()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- switches -------------------------------------------------------------------

    def load_table(self, name: str, table: pa.Table) -> None:
        with self._lock:
            self.duckdb.register("_incoming", table)
            self.duckdb.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM _incoming')
            self.duckdb.unregister("_incoming")

    def fail_next(
        self,
        error_name: str = "GENERIC_INTERNAL_ERROR",
        error_type: str = "INTERNAL_ERROR",
        message: str = "Query failed",
        times: int = 1,
    ) -> None:
        with self._lock:
            for _ in range(times):
                self._failures.append({"errorName": error_name, "errorType": error_type, "message": message})

    def http_error_next(self, status: int = 503, times: int = 1) -> None:
        with self._lock:
            self._http_errors.extend([status] * times)

    def hold(self) -> None:
        self.holding = True

    def release(self) -> None:
        """Let every held query run on: an unload writes its files now, polled or not."""
        with self._lock:
            self.holding = False
            held = [q for q in self.queries.values() if q.held]
            for query in held:
                query.held = False
                if query.state in ("QUEUED", "RUNNING") and query.location:
                    self._start(query)

    def query_by_sql(self, fragment: str) -> list[Query]:
        return [q for q in self.queries.values() if fragment in q.sql]

    # -- serving --------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> FakeTrino:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake._serve(self, "POST")

            def do_GET(self) -> None:
                fake._serve(self, "GET")

            def do_DELETE(self) -> None:
                fake._serve(self, "DELETE")

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-trino", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes the answers a cold start holds back
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(10)
            self._server = None
        self.duckdb.close()

    def __enter__(self) -> FakeTrino:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, request: BaseHTTPRequestHandler, method: str) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._answer(request, 413, {"message": "request too large"})
        body = request.rfile.read(length) if length else b""
        headers = {key: value for key, value in request.headers.items()}
        path = request.path.split("?", 1)[0]
        if method == "POST" and path == "/_control":
            return self._answer(request, *self._control(json.loads(body or b"{}")))
        with self._lock:
            status = self._http_errors.popleft() if self._http_errors else None
        if status is not None:
            return self._answer(request, status, {"message": f"HTTP {status}"}, text=True)
        if method == "POST" and path == "/v1/statement":
            return self._answer(request, 200, self._submit(body.decode("utf-8"), headers))
        if match := re.fullmatch(r"/v1/query/([\w]+)", path):
            query = self.queries.get(match[1])
            if query is None:
                return self._answer(request, 404, {"message": f"Query not found: {match[1]}"})
            query.requests.append(headers)
            if method == "DELETE":
                self._cancel(query)
                return self._answer(request, 204, None)
            return self._answer(request, 200, self._info(query))
        if match := re.fullmatch(r"/v1/statement/(?:queued|executing)/([\w]+)/\w+/(\d+)", path):
            query = self.queries.get(match[1])
            if query is None:
                return self._answer(request, 404, {"message": "Query not found"})
            query.requests.append(headers)
            if method == "DELETE":
                self._cancel(query)
                return self._answer(request, 204, None)
            page = self._page(query, int(match[2]))
            if page is None:
                return self._answer(request, 410, {"message": "Query results are gone"}, text=True)
            return self._answer(request, 200, page)
        return self._answer(request, 404, {"message": f"no such resource {path}"})

    @staticmethod
    def _answer(request: BaseHTTPRequestHandler, status: int, body: Any, *, text: bool = False) -> None:
        data = b"" if body is None else (body["message"].encode() if text else json.dumps(body).encode())
        request.send_response(status)
        request.send_header("Content-Type", "text/plain" if text else "application/json")
        request.send_header("Content-Length", str(len(data)))
        # One request per connection: no idle keep-alive connection holds a handler
        # thread past stop().
        request.send_header("Connection", "close")
        request.end_headers()
        request.wfile.write(data)

    def _control(self, command: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        action = command.get("action")
        if action == "fail":
            self.fail_next(
                command.get("error_name", "GENERIC_INTERNAL_ERROR"),
                command.get("error_type", "INTERNAL_ERROR"),
                command.get("message", "Query failed"),
                int(command.get("times", 1)),
            )
        elif action == "http_error":
            self.http_error_next(int(command.get("status", 503)), int(command.get("times", 1)))
        elif action == "hold":
            self.hold()
        elif action == "release":
            self.release()
        elif action == "cold_start":
            self.cold_start_queries = int(command.get("queries", 1))
            self.cold_start_seconds = float(command.get("seconds", 30))
        elif action == "slow_polls":
            self.slow_polls = int(command.get("polls", 0))
        elif action == "unload":
            self.unload_available = bool(command.get("available", True))
        else:
            return 400, {"message": f"unknown action {action!r}"}
        return 200, {"ok": True, "queries": len(self.queries)}

    # -- the query's life -----------------------------------------------------------

    def _submit(self, sql: str, headers: dict[str, str]) -> dict[str, Any]:
        with self._lock:
            cold = self.cold_start_queries > 0
            if cold:
                self.cold_start_queries -= 1
            stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime())
            query = Query(f"{stamp}_{next(self._ids):05d}_fake1", sql, headers, held=self.holding)
            query.requests.append(headers)
            self._read(query)
            if self._failures:
                failure = self._failures.popleft()
                query.error = failure
            self.queries[query.id] = query
        if cold:
            # A cold cluster: the answer comes after the client has given up.
            self._stopping.wait(self.cold_start_seconds)
        return self._results(query, next_token=0)

    def _results(
        self,
        query: Query,
        *,
        next_token: int | None,
        columns: bool = False,
        data: list[list[Any]] | None = None,
    ) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "id": query.id,
            "infoUri": f"{self.url}/ui/query.html?{query.id}",
            "stats": {
                "state": query.state,
                "queued": query.state == "QUEUED",
                "scheduled": query.state != "QUEUED",
                "nodes": 1,
                "totalSplits": 1,
                "completedSplits": int(query.state == "FINISHED"),
            },
            "warnings": [],
        }
        if next_token is not None:
            kind = "queued" if query.state == "QUEUED" else "executing"
            answer["nextUri"] = f"{self.url}/v1/statement/{kind}/{query.id}/y{next_token}/{next_token}"
        if query.error is not None and query.state == "FAILED":
            answer["error"] = self._error(query)
        if columns and query.columns is not None:
            answer["columns"] = query.columns
        if data:
            answer["data"] = data
        return answer

    def _error(self, query: Query) -> dict[str, Any]:
        error = query.error or {}
        answer = {
            "message": error["message"],
            "errorCode": ERROR_CODES.get(error["errorName"], TYPE_CODES.get(error["errorType"], 1)),
            "errorName": error["errorName"],
            "errorType": error["errorType"],
            "failureInfo": {
                "type": "io.trino.spi.TrinoException",
                "message": error["message"],
                "suppressed": [],
                "stack": [],
            },
        }
        if error.get("location"):
            line, column = error["location"]
            answer["errorLocation"] = {"lineNumber": line, "columnNumber": column}
        return answer

    def _page(self, query: Query, token: int) -> dict[str, Any] | None:
        with self._lock:
            if token in query.pages:  # the current page, asked for again
                return query.pages[token]
            if token != query.token or query.read_out:
                return None
            query.polls += 1
            page = self._advance(query, token)
            query.pages = {token: page}
            query.token = token + 1
            query.read_out = "nextUri" not in page
            return page

    def _advance(self, query: Query, token: int) -> dict[str, Any]:
        if query.state == "FAILED":
            return self._results(query, next_token=None)
        if query.error is not None:
            query.state = "FAILED"
            return self._results(query, next_token=None)
        if query.held or query.polls <= self.slow_polls:
            query.state = "RUNNING"
            return self._results(query, next_token=token + 1)
        if query.reader is None and query.unload_rows is None:
            self._start(query)
            if query.state == "FAILED":
                return self._results(query, next_token=None)
        query.state = "RUNNING"
        if query.unload_rows is not None:
            rows, query.unload_rows = query.unload_rows, []
            query.state = "FINISHED"
            return self._results(query, next_token=None, columns=True, data=rows)
        batch = self._next_rows(query)
        if batch is None:
            query.state = "FINISHED"
            return self._results(query, next_token=None, columns=True)
        return self._results(query, next_token=token + 1, columns=True, data=batch)

    @staticmethod
    def _read(query: Query) -> None:
        """What the request asks: its statement and parameters, and an unload's parts; a
        request Trino refuses fails the query (its first poll says so)."""
        try:
            query.statement, query.parameters = read_request(query.sql)
            match = UNLOAD.match(query.statement)
            if match:
                query.unload_query = match["query"]
                query.location = _argument(match, "location", query.statement, query.parameters)
                query.unload_format = _argument(match, "format", query.statement, query.parameters)
        except _Failed as failed:
            # Reported on the first poll, as Trino reports a statement it cannot analyse.
            query.error = failed.error()

    def _start(self, query: Query) -> None:
        """Run the query on DuckDB (an unload writes its files here and now)."""
        try:
            if query.location and not self.unload_available:
                raise _Failed(
                    "FUNCTION_NOT_FOUND",
                    "USER_ERROR",
                    "line 1:21: Table function 'system.unload' not registered",
                )
            cursor = self.duckdb.cursor()
            if query.location:
                from exports import parquet

                if str(query.unload_format).upper() != "PARQUET":
                    raise _Failed(
                        "INVALID_FUNCTION_ARGUMENT",
                        "USER_ERROR",
                        f"Unsupported format: {query.unload_format}",
                    )
                reader = cursor.sql(query.unload_query).to_arrow_reader(self.page_rows)
                written = parquet.write_batches(
                    reader, reader.schema, query.location, f"{query.id}-0.parquet", self.storage_options
                )
                query.columns = [
                    {"name": "path", "type": "varchar", "typeSignature": trino_type(pa.string())[1]},
                    {"name": "count", "type": "bigint", "typeSignature": trino_type(pa.int64())[1]},
                ]
                query.unload_rows = [[written.files[0], written.rows]]
                query.state = "FINISHED"
                return
            query.reader = cursor.sql(query.statement, params=query.parameters or None).to_arrow_reader(
                self.page_rows
            )
            query.columns = []
            for arrow_field in query.reader.schema:
                name, signature = trino_type(arrow_field.type)
                query.columns.append({"name": arrow_field.name, "type": name, "typeSignature": signature})
        except _Failed as failed:
            query.error = failed.error()
            query.state = "FAILED"
        except duckdb.Error as error:
            kind = "SYNTAX_ERROR" if isinstance(error, duckdb.ParserException) else "GENERIC_USER_ERROR"
            query.error = {"errorName": kind, "errorType": "USER_ERROR", "message": str(error)}
            query.state = "FAILED"

    def _next_rows(self, query: Query) -> list[list[Any]] | None:
        try:
            batch = query.reader.read_next_batch()
        except StopIteration:
            return None
        types = [column["type"] for column in query.columns]
        columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        return [
            [encode(value, types[i]) for i, value in enumerate(row)] for row in zip(*columns, strict=True)
        ]

    def _cancel(self, query: Query) -> None:
        with self._lock:
            if query.state in ("QUEUED", "RUNNING"):
                query.state = "FAILED"
                query.error = {
                    "errorName": "USER_CANCELED",
                    "errorType": "USER_ERROR",
                    "message": "Query was canceled",
                }

    def _info(self, query: Query) -> dict[str, Any]:
        with self._lock:
            if query.state == "QUEUED" and not query.held and query.error is None and query.polls:
                query.state = "RUNNING"
            info = {
                "queryId": query.id,
                "state": query.state,
                "query": query.sql,
                "self": f"{self.url}/v1/query/{query.id}",
                "scheduled": query.state != "QUEUED",
            }
            if query.state == "FAILED" and query.error:
                info["errorCode"] = {
                    "code": self._error(query)["errorCode"],
                    "name": query.error["errorName"],
                    "type": query.error["errorType"],
                }
                info["errorType"] = query.error["errorType"]
                info["failureInfo"] = {
                    "type": "io.trino.spi.TrinoException",
                    "message": query.error["message"],
                }
            return info


def _argument(match: re.Match[str], name: str, statement: str, values: list[Any]) -> Any:
    """An unload argument's value: its literal, or the value bound to its parameter (the
    parameters before it in the statement counted)."""
    if match[name] is not None:
        return match[name].replace("''", "'")
    offset = match.start(f"{name}_parameter")
    return values[sum(1 for index in _outside_literals(statement[:offset]) if statement[index] == "?")]


class _Failed(Exception):
    def __init__(self, name: str, kind: str, message: str, location: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.name, self.kind, self.location = name, kind, location

    @classmethod
    def at(cls, sql: str, offset: int, name: str, message: str) -> _Failed:
        """A user error at ``offset`` of ``sql``, its message led by Trino's ``line L:C``."""
        line = sql.count("\n", 0, offset) + 1
        column = offset - sql.rfind("\n", 0, offset)
        return cls(name, "USER_ERROR", f"line {line}:{column}: {message}", (line, column))

    def error(self) -> dict[str, Any]:
        """As a query keeps its error."""
        return {
            "errorName": self.name,
            "errorType": self.kind,
            "message": str(self),
            "location": self.location,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake Trino coordinator on DuckDB.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    options = parser.parse_args(argv)
    fake = FakeTrino(options.host, options.port).start()
    print(f"listening on {fake.url}/", flush=True)
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
