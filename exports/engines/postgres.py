"""A dataset's query exported from PostgreSQL straight into one Parquet file.

The rows leave PostgreSQL as ``COPY (<query>) TO STDOUT`` in its text format and are
parsed by Arrow's C++ CSV reader (tab-separated, unquoted), block by block, into record
batches that stream into the Parquet writer: no Python object per value, so an export
runs at close to the speed of COPY itself, and memory holds a few blocks and one row
group, whatever the row count. The text format, rather than CSV, because the server
writes it faster and Arrow parses it faster (no quotes, and a row is always one line).

The text format's rules: ``\\N`` is NULL and an empty field the empty string; a
backslash, tab, newline, carriage return, backspace, form feed or vertical tab inside a
value comes backslash-escaped (COPY TO writes no octal or hex escapes), so text columns
holding a backslash are unescaped after parsing; booleans are ``t``/``f``; the session
runs in UTC with ISO dates, so a ``timestamptz`` reads as ``2026-11-02 09:00:00+00``,
which Arrow's ISO 8601 parser takes as it is. The query runs in a read-only transaction
on a connection of its own.
"""

from __future__ import annotations

import io
import re
import select
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as csv
from psycopg import pq as libpq

from exports import parquet
from exports.engines import Cancellation, Cancelled

if TYPE_CHECKING:
    from exports.spec import JobSpec

# Arrow parses each block into one batch on its worker threads while the next is read.
# 1 MiB blocks exported fastest of 256 KiB to 16 MiB; larger ones only hold more memory.
BLOCK_BYTES = 1 << 20
# The longest silence from the server before the export gives up on the connection (a
# query's own time is bounded by the statement timeout, when one is set).
SILENCE_SECONDS = 3600

_SESSION = """SELECT set_config('default_transaction_read_only', 'on', false),
                     set_config('TimeZone', 'UTC', false),
                     set_config('DateStyle', 'ISO', false),
                     set_config('client_encoding', 'UTF8', false),
                     set_config('statement_timeout', %s, false)"""


class PostgresEngine:
    def __init__(
        self, dsn: str, *, storage_options: dict[str, Any] | None = None, statement_timeout_ms: int = 0
    ) -> None:
        self.dsn = dsn
        self.storage_options = dict(storage_options or {})
        self.statement_timeout_ms = statement_timeout_ms

    def export_direct(
        self, job: JobSpec, file_name: str, cancellation: Cancellation | None = None
    ) -> parquet.Written:
        """Run the job's query and write its rows into ``job.destination/file_name``.

        A SQL error propagates as psycopg raises it, and no file is left behind. A
        ``cancellation`` cancels the query on the server, whatever it is doing (waiting
        for a lock, sending rows), and the export raises ``Cancelled``, its partial file
        removed.
        """
        cancellation = cancellation or Cancellation()
        schema = parquet.arrow_schema(job.columns)
        try:
            with self._connect() as conn, conn.transaction():
                cancellation.on_cancel(conn.cancel)
                cancellation.check()
                conn.execute("SET TRANSACTION READ ONLY")
                query = _checked_query(conn, job.sql, list(job.column_names))
                with CopyOut(conn, f"COPY (\n{query}\n) TO STDOUT (FORMAT text)") as stream:
                    return parquet.write_batches(
                        cancellation.between(_text_batches(stream, schema)),
                        schema,
                        job.destination,
                        file_name,
                        self.storage_options,
                    )
        except psycopg.errors.QueryCanceled:
            if cancellation.cancelled:
                raise Cancelled(cancellation.reason) from None
            raise  # the statement timeout

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.dsn, autocommit=True)
        try:
            conn.execute(_SESSION, (str(self.statement_timeout_ms),))
        except BaseException:
            conn.close()
            raise
        return conn


def _checked_query(conn: psycopg.Connection[Any], sql: str, names: list[str]) -> str:
    """The query, once PostgreSQL has parsed it as one statement whose columns are ``names``.

    Parsed alone (an unnamed prepared statement: nothing runs), so that a query can never
    close COPY's parenthesis and name a file or program to copy to instead of STDOUT.
    """
    query = sql.strip().rstrip(";").rstrip()
    encoding = conn.info.encoding
    # libpq's parse and describe, which psycopg's cursors do not offer apart from running.
    _raise_for(conn.pgconn.prepare(b"", query.encode(encoding)), encoding)
    described = conn.pgconn.describe_prepared(b"")
    _raise_for(described, encoding)
    found = [(described.fname(index) or b"").decode(encoding) for index in range(described.nfields)]
    if found != names:
        raise ValueError(f"the query's columns are {found}, the job's {names}")
    return query


def _raise_for(result: libpq.abc.PGresult, encoding: str) -> None:
    if result.status != libpq.ExecStatus.COMMAND_OK:
        raise psycopg.errors.error_from_result(result, encoding=encoding)


def _text_batches(stream: CopyOut, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    binary = [field.name for field in schema if pa.types.is_binary(field.type)]
    # bytea arrives as text (an escaped backslash, x, hex digits): read as strings, decoded below.
    read_schema = pa.schema(
        [field.with_type(pa.string()) if field.name in binary else field for field in schema]
    )
    text = [field.name for field in schema if pa.types.is_string(field.type)]
    if stream.at_end():
        return  # Arrow refuses an empty input; no rows is no batches
    reader = csv.open_csv(
        stream,
        read_options=csv.ReadOptions(
            column_names=read_schema.names,
            autogenerate_column_names=False,
            block_size=BLOCK_BYTES,
            use_threads=True,
        ),
        parse_options=csv.ParseOptions(
            delimiter="\t",
            quote_char=False,
            escape_char=False,
            newlines_in_values=False,
            # A one-column row holding the empty string is an empty line.
            ignore_empty_lines=False,
        ),
        convert_options=csv.ConvertOptions(
            column_types=dict(zip(read_schema.names, read_schema.types, strict=True)),
            null_values=["\\N"],
            strings_can_be_null=True,
            true_values=["t"],
            false_values=["f"],
        ),
    )
    for batch in reader:
        # Arrow parses only blocks already read: a batch with an escape was read before
        # it is seen here, and so it is unescaped.
        if text and stream.escapes_seen:
            batch = _unescape_text(batch, text)
        yield _decode_bytea(batch, binary) if binary else batch


_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPED = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unescaped(value: str) -> str:
    return _ESCAPE.sub(lambda match: _ESCAPED.get(match[1], match[1]), value)


def _unescape_text(batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    """The text columns with COPY's backslash escapes undone, in the values that have one.

    Arrow finds those values; only they take a Python pass, so plain text costs a scan.
    """
    columns = list(batch.columns)
    for name in names:
        index = batch.schema.get_field_index(name)
        escaped = pc.fill_null(pc.match_substring(columns[index], "\\"), False)
        if not pc.any(escaped).as_py():
            continue
        values = pc.filter(columns[index], escaped).to_pylist()
        columns[index] = pc.replace_with_mask(
            columns[index], escaped, pa.array([_unescaped(value) for value in values], pa.string())
        )
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _decode_bytea(batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    # Arrow has no hex decoding; bytea columns are rare enough for a Python pass.
    columns = list(batch.columns)
    for name in names:
        index = batch.schema.get_field_index(name)
        text = pc.utf8_slice_codeunits(columns[index], 3)  # past the escaped "\\x"
        columns[index] = pa.array(
            [None if value is None else bytes.fromhex(value) for value in text.to_pylist()], pa.binary()
        )
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


class CopyOut(io.RawIOBase):
    """The rows of a ``COPY … TO STDOUT`` as the byte stream Arrow reads in blocks.

    Read from libpq directly: psycopg's ``Copy.read()`` costs about twice the CPU per
    row, which is most of an export's own work. Waits for the server in ``select``, so
    the GIL is free meanwhile (libpq's blocking calls hold it, and the worker's event
    loop shares the process). A query that fails, before or during the rows, raises
    psycopg's error for it; leaving early cancels the COPY.
    """

    def __init__(self, conn: psycopg.Connection[Any], statement: str) -> None:
        self._conn = conn
        self._pg = conn.pgconn
        self._statement = statement
        self._pending: bytes | memoryview | None = None
        # Whether any row read so far held an escape: until one does, no value needs
        # undoing, and the parsed batches are not searched for them.
        self.escapes_seen = False
        self._done = False

    def __enter__(self) -> CopyOut:
        self._pg.send_query(self._statement.encode(self._conn.info.encoding))
        self._flush()
        result = self._result()
        if result is None or result.status != libpq.ExecStatus.COPY_OUT:
            self._done = True
            self._drain(raise_error=False)
            if result is None:
                raise psycopg.OperationalError(self._pg.error_message.decode(errors="replace"))
            _raise_for(result, self._conn.info.encoding)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._done:
            # An export that stopped early (the writer failed): the server stops sending.
            self._pg.get_cancel().cancel()
            while self._next_row(raise_error=False) is not None:
                pass
        # The cancel's own error, or one already raised from read(), is not news.
        self._drain(raise_error=False)

    def _flush(self) -> None:
        """Send the whole query. psycopg's connections are non-blocking, so libpq sends
        what the socket takes at once: a query longer than the socket's buffer (a long
        IN list; a Unix socket's is a few hundred kB) would otherwise never reach the
        server, and the wait for its answer would last until the silence limit."""
        sock = self._pg.socket
        while self._pg.flush():
            readable, writable, _ = select.select([sock], [sock], [], SILENCE_SECONDS)
            if not (readable or writable):
                raise psycopg.OperationalError(f"PostgreSQL took nothing for {SILENCE_SECONDS} s")
            if readable:
                self._pg.consume_input()

    def _wait(self) -> None:
        if not select.select([self._pg.socket], [], [], SILENCE_SECONDS)[0]:
            raise psycopg.OperationalError(f"PostgreSQL sent nothing for {SILENCE_SECONDS} s")
        self._pg.consume_input()

    def _result(self) -> libpq.abc.PGresult | None:
        while self._pg.is_busy():
            self._wait()
        return self._pg.get_result()

    def _drain(self, *, raise_error: bool = True) -> None:
        """Read the results that end the COPY; raise the error among them, if any."""
        error = None
        while (result := self._result()) is not None:
            if result.status == libpq.ExecStatus.FATAL_ERROR and error is None:
                error = result
        if error is not None and raise_error:
            _raise_for(error, self._conn.info.encoding)

    def _next_row(self, *, raise_error: bool = True) -> bytes | memoryview | None:
        """The next row; None at the end, once the COPY's outcome is read (its error raised)."""
        while True:
            size, row = self._pg.get_copy_data(1)
            if size > 0:
                return row
            if size == 0:
                self._wait()
                continue
            self._done = True
            self._drain(raise_error=raise_error)
            return None

    def readable(self) -> bool:
        return True

    def rows(self) -> Iterator[bytes | memoryview]:
        """Each row as it comes (the benchmark's floor: reading and nothing else)."""
        get_copy_data = self._pg.get_copy_data
        while not self._done:
            size, row = get_copy_data(1)
            if size > 0:
                yield row
            else:
                self._after_empty_read(size)

    def _after_empty_read(self, size: int) -> None:
        """What libpq's ``get_copy_data`` answering ``size`` (no row) asks for: a wait for
        more from the server (0), or the end of the COPY (-1), its error raised."""
        if size == 0:
            self._wait()
        else:
            self._done = True
            self._drain()

    def at_end(self) -> bool:
        while self._pending is None and not self._done:
            got, row = self._pg.get_copy_data(1)
            if got > 0:
                self._pending = row
            else:
                self._after_empty_read(got)
        return self._pending is None

    def read(self, size: int | None = -1) -> bytes:
        """Whole rows, as many as fit in ``size`` bytes (one row at least, cut if it must).

        A ``bytearray`` of its own each time: Arrow takes it as it is, without a copy.
        """
        wanted = sys.maxsize if size is None or size < 0 else size
        buffer = bytearray()
        if self._pending is not None:
            buffer += self._pending
            self._pending = None
        # The hot loop of an export (a call per row): locals only, no method call per row.
        get_copy_data = self._pg.get_copy_data
        while len(buffer) < wanted and not self._done:
            got, row = get_copy_data(1)
            if got <= 0:
                self._after_empty_read(got)
            elif len(buffer) + got > wanted and buffer:
                self._pending = bytes(row)  # the next read's first row
                break
            else:
                buffer += row
        # A backslash that is not one of a NULL's (``\\N``) starts an escape.
        if not self.escapes_seen and buffer.count(b"\\") != buffer.count(b"\\N"):
            self.escapes_seen = True
        return buffer  # type: ignore[return-value]

    def readinto(self, target: Any) -> int:
        """At most ``len(target)`` bytes, as a file's readers expect (``read`` may give a
        long row whole); what does not fit comes first next time."""
        room = len(target)
        data = self.read(room)
        if len(data) > room:
            self._pending = bytes(data[room:]) + (self._pending or b"")
            data = data[:room]
        target[: len(data)] = data
        return len(data)


def copy_read_rate(dsn: str, sql: str) -> tuple[int, float]:
    """Rows of ``COPY (<sql>) TO STDOUT`` read and thrown away, and the seconds it took:
    the floor any export of that query runs against."""
    rows = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        with CopyOut(conn, f"COPY (\n{sql.strip().rstrip(';')}\n) TO STDOUT") as copy:
            for _ in copy.rows():
                rows += 1
        return rows, time.perf_counter() - started
