"""The Trino engine against the fake coordinator, over HTTP with the official client:
typed pages, the role, tags and source on every call, UNLOAD and its polls, the answers
for a missing system.unload, failures, cancellation, and the cold-start retry."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from devtools.fakes.trino import FakeTrino
from exports import entity_sql, parquet
from exports.engines.trino import (
    ColdStartExhausted,
    EngineError,
    InvalidQuery,
    TrinoEngine,
    TrinoSettings,
    is_unload_missing,
    retry_cold_start,
)
from exports.spec import JobSpec
from jobs.testing import wait_until

ROWS = 2500


@pytest.fixture
def fake():
    with FakeTrino(page_rows=1000) as server:
        server.load_table(
            "orders",
            pa.table(
                {
                    "id": pa.array(range(ROWS), pa.int64()),
                    "amount": pa.array(
                        [decimal.Decimal("1.25") * n for n in range(ROWS)], pa.decimal128(14, 2)
                    ),
                    "at": pa.array(
                        [dt.datetime(2026, 11, 2, 9, tzinfo=dt.UTC)] * ROWS, pa.timestamp("us", tz="UTC")
                    ),
                    "day": pa.array([dt.date(2026, 11, 2)] * ROWS, pa.date32()),
                    "note": [None if n % 10 == 0 else f'note, "{n}"' for n in range(ROWS)],
                    "score": pa.array([n / 3 for n in range(ROWS)], pa.float64()),
                }
            ),
        )
        yield server


def job(
    destination: str,
    sql: str = "SELECT * FROM orders",
    role: str = "analytics",
    columns: tuple[str, ...] = ("note", "id", "amount", "at", "day", "score"),
) -> JobSpec:
    return JobSpec(
        id=1,
        snapshot_id=1,
        tenant_id=1,
        generation=1,
        job_type="node",
        entity_name="orders",
        engine="trino",
        sql=entity_sql.entity_select(sql, list(columns)),
        column_names=columns,
        starburst_role=role,
        destination=destination,
    )


def engine(fake: FakeTrino, **options) -> TrinoEngine:
    return TrinoEngine(TrinoSettings(url=fake.url, **options))


def test_a_direct_export_pages_typed_rows_into_parquet_in_the_jobs_order(fake, tmp_path):
    written = engine(fake).export_direct(job(str(tmp_path)), "part-g1.parquet")
    table = pq.read_table(written.files[0])
    assert written.rows == table.num_rows == ROWS
    assert table.schema.names == ["note", "id", "amount", "at", "day", "score"]
    assert table.schema.field("amount").type == pa.decimal128(14, 2)
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    first, second = table.slice(0, 2).to_pylist()
    assert first["note"] is None and second["note"] == 'note, "1"'
    assert second["amount"] == decimal.Decimal("1.25") and second["day"] == dt.date(2026, 11, 2)
    assert second["at"] == dt.datetime(2026, 11, 2, 9, tzinfo=dt.UTC)
    query = next(iter(fake.queries.values()))
    assert query.polls >= 3  # three pages of 1,000 rows at most


def test_every_call_carries_the_role_tags_and_source(fake, tmp_path):
    settings = {"client_tags": ("conveyor-export", "nightly"), "source": "export-worker-7"}
    engine(fake, **settings).export_direct(job(str(tmp_path), role="finance-reporting"), "f.parquet")
    query = next(iter(fake.queries.values()))
    for headers in query.requests:
        assert headers["X-Use-Case-Id"] == "finance-reporting"
        assert headers["X-Trino-Role"] == "system=ROLE%7Bfinance-reporting%7D"
        assert headers["X-Trino-Client-Tags"] == "conveyor-export,nightly"
        assert headers["X-Trino-Source"] == "export-worker-7"


def test_an_unload_is_polled_until_finished_and_its_rows_counted_from_the_files(fake, tmp_path):
    fake.hold()
    trino = engine(fake)
    submitted = trino.submit_unload(job(str(tmp_path / "g1")))
    running = trino.poll(submitted.next_uri, "analytics")
    assert running.state == "RUNNING" and running.next_uri
    assert trino.status(submitted.query_id, "analytics").state == "RUNNING"
    fake.release()
    # The engine finished without anyone polling: asked by id, it says so.
    assert trino.status(submitted.query_id, "analytics").state == "FINISHED"
    done = trino.poll(running.next_uri, "analytics")
    assert done.state == "FINISHED" and done.next_uri == ""
    assert parquet.count_rows(str(tmp_path / "g1")).rows == ROWS
    query = fake.queries[submitted.query_id]
    assert "system.unload" in query.sql and query.headers["X-Use-Case-Id"] == "analytics"


def test_an_unloads_location_and_format_are_bound_parameters(fake, tmp_path):
    destination = str(tmp_path / "tenant-1" / "snapshot-1" / "nodes" / "it's")
    spec = dataclasses.replace(job(destination), destination=destination)
    trino = engine(fake, export_root=str(tmp_path))
    submitted = trino.submit_unload(spec)
    query = fake.queries[submitted.query_id]
    assert query.sql.startswith("EXECUTE IMMEDIATE 'SELECT * FROM TABLE(system.unload(")
    assert "location => ?, format => ?))' USING " in query.sql
    assert destination not in query.statement  # a value, never text of the statement
    assert query.parameters == [destination, "PARQUET"] and query.location == destination
    assert trino.poll(submitted.next_uri, "analytics").state == "FINISHED"
    assert parquet.count_rows(destination).rows == ROWS


def test_an_unload_outside_the_jobs_snapshot_folder_is_never_sent(fake, tmp_path):
    trino = engine(fake, export_root=str(tmp_path))
    for elsewhere in (
        tmp_path / "tenant-2" / "snapshot-1" / "nodes" / "orders",
        tmp_path / "tenant-1" / "snapshot-1" / ".." / "snapshot-9",
    ):
        with pytest.raises(InvalidQuery, match="not in its snapshot's folder"):
            trino.submit_unload(job(str(elsewhere)))
    assert fake.queries == {}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 AS id; DROP TABLE orders",
        "SELECT * FROM orders) AS entity), location => '/tmp/x', format => 'PARQUET')) --",
        "SELECT * FROM TABLE(system.unload(input => TABLE(orders), location => '/x', format => 'PARQUET'))",
        "DELETE FROM orders",
    ],
)
def test_a_job_whose_query_is_not_one_query_is_refused_before_anything_is_sent(fake, tmp_path, sql):
    spec = dataclasses.replace(job(str(tmp_path)), sql=sql)
    trino = engine(fake)
    with pytest.raises(InvalidQuery, match="the job's query is refused"):
        trino.submit_unload(spec)
    with pytest.raises(InvalidQuery, match="the job's query is refused"):
        trino.export_direct(spec, "f.parquet")
    assert fake.queries == {}


def test_a_missing_system_unload_answers_function_not_found(fake, tmp_path):
    fake.unload_available = False
    trino = engine(fake)
    submitted = trino.submit_unload(job(str(tmp_path)))
    failed = trino.poll(submitted.next_uri, "analytics")
    assert failed.state == "FAILED" and failed.error_name == "FUNCTION_NOT_FOUND"
    assert is_unload_missing(failed.error_name, failed.error)
    assert is_unload_missing("GENERIC_USER_ERROR", "Table function system.unload not registered")
    assert not is_unload_missing("GENERIC_INTERNAL_ERROR", "disk full")


def test_a_failed_query_names_its_error_and_a_cancelled_one_says_so(fake, tmp_path):
    fake.fail_next("EXCEEDED_TIME_LIMIT", "INSUFFICIENT_RESOURCES", "Query exceeded maximum time")
    trino = engine(fake)
    with pytest.raises(EngineError) as raised:
        trino.export_direct(job(str(tmp_path)), "f.parquet")
    assert raised.value.error_name == "EXCEEDED_TIME_LIMIT"
    # Trino's own words and the query's id, not the client library's repr.
    assert re.fullmatch(r"EXCEEDED_TIME_LIMIT: Query exceeded maximum time \(query \S+\)", str(raised.value))
    assert parquet.count_rows(str(tmp_path)).files == []
    fake.hold()
    submitted = trino.submit_unload(job(str(tmp_path / "g1")))
    trino.cancel(submitted.next_uri, "analytics")
    cancelled = trino.status(submitted.query_id, "analytics")
    assert cancelled.state == "FAILED" and cancelled.error_name == "USER_CANCELED"
    trino.cancel(submitted.query_id, "analytics")  # already ended: nothing to do


def test_an_expired_next_uri_is_gone_and_the_query_is_asked_by_id(fake, tmp_path):
    trino = engine(fake)
    submitted = trino.submit_unload(job(str(tmp_path / "g1")))
    assert trino.poll(submitted.next_uri, "analytics").state == "FINISHED"
    with pytest.raises(Exception, match="410"):
        trino.poll(submitted.next_uri.replace("/0", "/7"), "analytics")
    assert trino.status(submitted.query_id, "analytics").state == "FINISHED"
    with pytest.raises(Exception, match="404"):
        trino.status("20260101_000000_99999_nope0", "analytics")


def test_a_query_whose_columns_are_not_the_jobs_fails(fake, tmp_path):
    spec = job(str(tmp_path))
    spec = JobSpec(**{**spec.__dict__, "sql": "SELECT id AS other FROM orders"})
    with pytest.raises(EngineError, match="columns are"):
        engine(fake).export_direct(spec, "f.parquet")


def test_a_cold_cluster_is_retried_twice_five_seconds_apart(fake, tmp_path):
    fake.cold_start_queries, fake.cold_start_seconds = 1, 3.0
    trino = engine(fake, request_timeout=0.5)
    pauses: list[float] = []
    written = retry_cold_start(
        lambda: trino.export_direct(job(str(tmp_path)), "f.parquet"), sleep=pauses.append
    )
    assert written.rows == ROWS and pauses == [5.0]


def test_a_cold_start_that_never_warms_up_gives_up_naming_the_error(fake, tmp_path):
    fake.cold_start_queries, fake.cold_start_seconds = 3, 3.0
    trino = engine(fake, request_timeout=0.5)
    pauses: list[float] = []
    with pytest.raises(ColdStartExhausted) as raised:
        retry_cold_start(lambda: trino.export_direct(job(str(tmp_path)), "f.parquet"), sleep=pauses.append)
    assert str(raised.value) == "Direct export failed after 2 retries: TrinoConnectionError"
    assert pauses == [5.0, 5.0]


def test_other_errors_are_not_retried():
    calls, pauses = [], []

    def refuse():
        calls.append(1)
        raise EngineError("SYNTAX_ERROR: line 1:1: mismatched input")

    with pytest.raises(EngineError):
        retry_cold_start(refuse, sleep=pauses.append)
    assert calls == [1] and pauses == []


def test_unload_and_direct_export_write_to_s3(fake, s3_options):
    fake.storage_options = s3_options
    trino = TrinoEngine(TrinoSettings(url=fake.url, storage_options=s3_options))
    submitted = trino.submit_unload(job("s3://exports/t1/snapshot-1/orders/g1"))
    assert trino.poll(submitted.next_uri, "analytics").state == "FINISHED"
    assert parquet.count_rows("s3://exports/t1/snapshot-1/orders/g1", s3_options).rows == ROWS
    written = trino.export_direct(job("s3://exports/t1/snapshot-2/orders"), "part-g1.parquet")
    assert written.files == ["s3://exports/t1/snapshot-2/orders/part-g1.parquet"]
    assert parquet.count_rows("s3://exports/t1/snapshot-2/orders", s3_options).rows == ROWS


def test_a_cancelled_direct_export_cancels_its_query_and_leaves_no_file(fake, tmp_path):
    import threading

    from exports.engines import Cancellation, Cancelled

    fake.hold()  # the query waits on Trino until released (or cancelled)
    cancellation = Cancellation()
    outcome: list[BaseException | object] = []

    def export() -> None:
        try:
            outcome.append(engine(fake).export_direct(job(str(tmp_path)), "f.parquet", cancellation))
        except BaseException as error:
            outcome.append(error)

    runner = threading.Thread(target=export)
    runner.start()
    wait_until(lambda: fake.queries, 10, "the query to reach Trino")
    cancellation.cancel("cancelled by an operator")
    runner.join(15)

    assert not runner.is_alive()
    assert isinstance(outcome[0], Cancelled) and str(outcome[0]) == "cancelled by an operator"
    [query] = fake.queries.values()
    assert query.state == "FAILED"  # Trino was told: DELETE of its next URI
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
