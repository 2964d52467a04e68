"""The PostgreSQL engine against the real database: every value of every column type comes
back exactly from the Parquet file, in the job's column order; the query cannot write,
cannot leave COPY's parentheses, and an error leaves neither a file nor a connection."""

from __future__ import annotations

import datetime as dt
import io
import math
import uuid
from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

from exports.engines.postgres import BLOCK_BYTES, CopyOut, PostgresEngine, copy_read_rate
from exports.spec import JobSpec
from jobs.testing import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = "exports_engine_mixed"
# (column, PostgreSQL type, the Trino type the job declares)
COLUMNS = [
    ("id", "bigint", "bigint"),
    ("n", "integer", "integer"),
    ("small", "smallint", "smallint"),
    ("label", "text", "varchar"),
    ("code", "varchar(8)", "varchar(8)"),
    ("flag", "boolean", "boolean"),
    ("amount", "numeric(12,4)", "decimal(12,4)"),
    ("created", "timestamptz", "timestamp(6) with time zone"),
    ("local", "timestamp", "timestamp(6)"),
    ("day", "date", "date"),
    ("ratio", "double precision", "double"),
    ("fraction", "real", "real"),
    ("doc", "jsonb", "json"),
    ("uid", "uuid", "uuid"),
    ("raw", "bytea", "varbinary"),
]
UTC = dt.UTC
PARIS = dt.timezone(dt.timedelta(hours=1))
ROWS = [
    (
        1,
        7,
        3,
        'commas, "quotes", and\na newline\r\n',
        "a,b",
        True,
        Decimal("12345678.1234"),
        dt.datetime(2026, 11, 2, 9, 0, tzinfo=UTC),
        dt.datetime(2026, 11, 2, 9, 0, 0, 123456),
        dt.date(2026, 11, 2),
        1.5,
        0.25,
        '{"a": [1, 2.5, null], "s": "x,\\"y\\"\\n"}',
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        b'\x00\xff,\n"',
    ),
    (
        2,
        -2147483648,
        -32768,
        "",
        "",
        False,
        Decimal("-0.0001"),
        dt.datetime(2026, 3, 29, 2, 30, 0, 1, tzinfo=PARIS),
        dt.datetime(1970, 1, 1),
        dt.date(1, 1, 1),
        math.nan,
        -math.inf,
        "{}",
        uuid.UUID(int=0),
        b"",
    ),
    (
        3,
        2147483647,
        32767,
        "ünïcødé ✓ 𝄞 日本",
        "NULL",
        None,
        Decimal("99999999.9999"),
        dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59),
        dt.date(9999, 12, 31),
        math.inf,
        3.4028234663852886e38,
        '"a string"',
        uuid.UUID(int=2**128 - 1),
        b"\\x41",
    ),
    (
        9223372036854775807,
        0,
        0,
        "\\N",
        " ",
        True,
        Decimal("0"),
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.datetime(2000, 2, 29, 12),
        dt.date(2000, 2, 29),
        5e-324,
        1.1754943508222875e-38,
        "[]",
        uuid.UUID(int=1),
        bytes(range(256)),
    ),
    (-9223372036854775808, *([None] * (len(COLUMNS) - 1))),
]
NAMES = [name for name, _, _ in COLUMNS]
TYPES = dict((name, trino) for name, _, trino in COLUMNS)


def dsn(**options: str) -> str:
    """The test database, as the engine is given it (a socket directory host as it is)."""
    params = connection.get_connection_params()
    keys = ("host", "port", "dbname", "user", "password")
    return make_conninfo(**{key: str(params[key]) for key in keys if params.get(key)}, **options)


@pytest.fixture
def mixed_table() -> Iterator[str]:
    """A committed table of every type with the awkward values: the engine reads it on a
    connection of its own."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {TABLE} (" + ", ".join(f"{name} {pg_type}" for name, pg_type, _ in COLUMNS) + ")"
        )
        placeholders = ", ".join("%s::jsonb" if name == "doc" else "%s" for name in NAMES)
        cursor.executemany(f"INSERT INTO {TABLE} VALUES ({placeholders})", ROWS)
    yield TABLE
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {TABLE}")


def job(sql: str, names: list[str], destination: str) -> JobSpec:
    return JobSpec(
        id=1,
        snapshot_id=1,
        tenant_id=1,
        generation=1,
        job_type="node",
        entity_name="mixed",
        engine="postgres",
        sql=sql,
        column_names=tuple(names),
        column_types=tuple(TYPES.get(name, "bigint") for name in names),
        destination=destination,
    )


def expected(row: tuple, names: list[str]) -> dict:
    """A row as the Parquet file holds it: json as PostgreSQL prints jsonb, uuids as text,
    timestamps with a zone in UTC."""
    value = dict(zip(NAMES, row, strict=True))
    if value["uid"] is not None:
        value["uid"] = str(value["uid"])
    if value["created"] is not None:
        value["created"] = value["created"].astimezone(UTC)
    return {name: value[name] for name in names}


def same(found: object, wanted: object) -> bool:
    if isinstance(wanted, float) and math.isnan(wanted):
        return isinstance(found, float) and math.isnan(found)
    return found == wanted and type(found) is type(wanted)


def test_every_value_round_trips_into_parquet_in_the_jobs_order(mixed_table, tmp_path):
    names = list(reversed(NAMES))  # not the table's order
    sql = f"SELECT {', '.join(names)} FROM {mixed_table} ORDER BY id"

    written = PostgresEngine(dsn()).export_direct(job(sql, names, str(tmp_path)), "part-g1.parquet")

    assert written.rows == len(ROWS)
    assert written.files == [str(tmp_path / "part-g1.parquet")]
    table = pq.read_table(written.files[0])
    assert table.schema.names == names
    assert table.schema.field("amount").type == pa.decimal128(12, 4)
    assert table.schema.field("created").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("fraction").type == pa.float32()
    wanted = [expected(row, names) for row in sorted(ROWS, key=lambda row: row[0])]
    # jsonb prints its own way: compare with what PostgreSQL says the text is.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT doc::text FROM {mixed_table} ORDER BY id")
        for row, (doc,) in zip(wanted, cursor.fetchall(), strict=True):
            row["doc"] = doc
    for found, row in zip(table.to_pylist(), wanted, strict=True):
        different = {name: (found[name], row[name]) for name in names if not same(found[name], row[name])}
        assert different == {}, f"row {row['id']}"


def test_an_empty_answer_writes_a_file_with_the_columns(mixed_table, tmp_path):
    sql = f"SELECT id, label FROM {mixed_table} WHERE false"

    written = PostgresEngine(dsn()).export_direct(job(sql, ["id", "label"], str(tmp_path)), "f.parquet")

    assert written.rows == 0
    assert pq.read_table(written.files[0]).schema.names == ["id", "label"]


def test_a_large_answer_streams_through_many_blocks_and_row_groups(tmp_path):
    sql = "SELECT i AS id, repeat(E'x,\"\\n', i % 50) AS label FROM generate_series(1, 300000) i"

    written = PostgresEngine(dsn()).export_direct(job(sql, ["id", "label"], str(tmp_path)), "f.parquet")

    table = pq.read_table(written.files[0])
    assert written.rows == table.num_rows == 300_000
    assert pq.read_metadata(written.files[0]).num_row_groups == 3
    assert pc.sum(table.column("id")).as_py() == 300_000 * 300_001 // 2
    assert table.column("label")[299_999].as_py() == 'x,"\n' * (300_000 % 50)


# Any text PostgreSQL stores (no NUL), leaning on what COPY's text format escapes.
TEXTS = st.text(
    st.one_of(
        st.sampled_from('\\\t\n\r\b\f\vN,"x'),
        st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.none(), TEXTS), min_size=1, max_size=8))
def test_any_text_and_null_round_trip_through_the_text_format(values, tmp_path):
    # One column, so that an empty string is a whole empty line of the COPY.
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE exports_engine_texts (n integer, label text)")
        cursor.executemany("INSERT INTO exports_engine_texts VALUES (%s, %s)", list(enumerate(values)))
    try:
        sql = "SELECT label FROM exports_engine_texts ORDER BY n"
        written = PostgresEngine(dsn()).export_direct(job(sql, ["label"], str(tmp_path)), "texts.parquet")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE exports_engine_texts")

    assert pq.read_table(written.files[0]).column("label").to_pylist() == values


def test_rows_longer_than_a_block_are_read_whole(tmp_path):
    # Wider than a block (one and a half, three), side by side, escapes at both ends.
    longs = {2: "\\" + "é" * (BLOCK_BYTES * 3 // 4) + "\t", 3: "\n" + "x" * (BLOCK_BYTES * 3) + "\\"}
    sql = (
        "SELECT n AS id, CASE n WHEN 2 THEN %s WHEN 3 THEN %s ELSE repeat('s', n) END AS label"
        " FROM generate_series(1, 20000) n"
    )
    with connection.cursor() as cursor:
        sql = cursor.mogrify(sql, [longs[2], longs[3]])

    written = PostgresEngine(dsn()).export_direct(job(sql, ["id", "label"], str(tmp_path)), "f.parquet")

    labels = pq.read_table(written.files[0]).column("label").to_pylist()
    assert labels == [longs.get(n, "s" * n) for n in range(1, 20001)]


def test_the_copy_stream_reads_whole_through_a_buffered_reader():
    # A buffered reader fills fixed-size buffers (readinto): a row longer than one is cut
    # across them, and nothing is lost or repeated.
    sql = "SELECT n, repeat('x', n * 997) FROM generate_series(1, 40) n"
    expected = b"".join(b"%d\t%s\n" % (n, b"x" * (n * 997)) for n in range(1, 41))
    with psycopg.connect(dsn(), autocommit=True) as conn, CopyOut(conn, f"COPY ({sql}) TO STDOUT") as copy:
        reader = io.BufferedReader(copy, buffer_size=4096)
        assert b"".join(iter(lambda: reader.read(3000), b"")) == expected


@pytest.mark.parametrize(
    "sql",
    [
        f"WITH gone AS (DELETE FROM {TABLE} RETURNING id) SELECT id FROM gone",
        f"WITH made AS (INSERT INTO {TABLE} (id) VALUES (42) RETURNING id) SELECT id FROM made",
        f"SELECT id FROM {TABLE} FOR UPDATE",
    ],
)
def test_a_query_that_writes_is_refused_by_the_read_only_transaction(mixed_table, tmp_path, sql):
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        PostgresEngine(dsn()).export_direct(job(sql, ["id"], str(tmp_path)), "f.parquet")

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {mixed_table}")
        assert cursor.fetchone() == (len(ROWS),)
    assert list(tmp_path.iterdir()) == []


def test_a_query_cannot_close_the_copy_and_write_a_server_file(tmp_path):
    target = tmp_path / "stolen.csv"
    sql = f"SELECT 1 AS id) TO '{target}' --"

    with pytest.raises(psycopg.errors.SyntaxError):
        PostgresEngine(dsn()).export_direct(job(sql, ["id"], str(tmp_path / "out")), "f.parquet")
    assert not target.exists()


def test_an_error_midway_propagates_and_leaves_no_file(tmp_path):
    sql = "SELECT 1 / (200000 - i) AS id FROM generate_series(1, 300000) i"
    engine = PostgresEngine(dsn(application_name="exports-engine-error-test"))

    with pytest.raises(psycopg.errors.DivisionByZero):
        engine.export_direct(job(sql, ["id"], str(tmp_path)), "f.parquet")

    assert list(tmp_path.iterdir()) == []
    wait_until(lambda: not connected("exports-engine-error-test"), what="the engine's connection to close")


def test_the_connection_is_closed_after_an_export(tmp_path):
    engine = PostgresEngine(dsn(application_name="exports-engine-close-test"))

    engine.export_direct(job("SELECT 1::bigint AS id", ["id"], str(tmp_path)), "f.parquet")

    wait_until(lambda: not connected("exports-engine-close-test"), what="the engine's connection to close")


def connected(application_name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [application_name]
        )
        return cursor.fetchone()[0] > 0


def test_columns_other_than_the_jobs_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"columns are \['id', 'other'\], the job's \['id', 'label'\]"):
        PostgresEngine(dsn()).export_direct(
            job("SELECT 1 AS id, 'x' AS other", ["id", "label"], str(tmp_path)), "f.parquet"
        )
    assert list(tmp_path.iterdir()) == []


def test_a_statement_timeout_cancels_a_slow_query(tmp_path):
    engine = PostgresEngine(dsn(), statement_timeout_ms=50)

    with pytest.raises(psycopg.errors.QueryCanceled):
        engine.export_direct(job("SELECT 1 AS id FROM pg_sleep(5)", ["id"], str(tmp_path)), "f.parquet")


def test_the_copy_baseline_reads_every_row():
    rows, seconds = copy_read_rate(dsn(), "SELECT i, 'a,b' FROM generate_series(1, 5000) i;")

    assert rows == 5000
    assert seconds >= 0
