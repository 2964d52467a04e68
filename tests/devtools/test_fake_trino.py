"""The fake Trino refuses what Trino refuses, in Trino's error shape: a request of several
statements (a syntax error), DuckDB's statements and its readers of files and hosts
(which Trino does not have); and its DuckDB cannot reach the host's files anyway."""

from __future__ import annotations

from typing import Any

import duckdb
import httpx
import pyarrow as pa
import pytest

from devtools.fakes.trino import FakeTrino


@pytest.fixture
def fake():
    with FakeTrino() as server:
        server.load_table("victim", pa.table({"a": [1, 2, 3]}))
        yield server


def run(fake: FakeTrino, sql: str) -> dict[str, Any]:
    """A query sent as the client sends it and polled to its end: the last answer, with
    the rows of every page."""
    answer = httpx.post(f"{fake.url}/v1/statement", content=sql, timeout=5).json()
    rows = []
    while "nextUri" in answer:
        answer = httpx.get(answer["nextUri"], timeout=5).json()
        rows += answer.get("data", [])
    return {**answer, "data": rows}


def assert_refused(answer: dict[str, Any], name: str, code: int, where: str, message: str) -> None:
    """Failed with Trino's error object: its name, type and code, the message that starts
    with the line and column, which ``errorLocation`` gives too."""
    error = answer["error"]
    assert answer["stats"]["state"] == "FAILED"
    assert (error["errorName"], error["errorType"], error["errorCode"]) == (name, "USER_ERROR", code)
    assert error["message"] == error["failureInfo"]["message"] == f"line {where}: {message}"
    line, column = where.split(":")
    assert error["errorLocation"] == {"lineNumber": int(line), "columnNumber": int(column)}


def victim_rows(fake: FakeTrino) -> int:
    return run(fake, "SELECT count(*) FROM victim")["data"][0][0]


@pytest.mark.parametrize(
    ("sql", "where"),
    [
        ("SELECT 1; DROP TABLE victim", "1:9"),
        # An entity's query that closes the subquery it is wrapped in, and opens another.
        (
            "SELECT a FROM (SELECT 1 AS a) AS entity; DROP TABLE victim; SELECT 1 AS a FROM (SELECT 1) x",
            "1:40",
        ),
        ("SELECT 1\n;DROP TABLE victim", "2:1"),
        ("EXECUTE IMMEDIATE 'SELECT 1; DROP TABLE victim'", "1:9"),
    ],
)
def test_a_second_statement_is_a_syntax_error_and_never_runs(fake, sql, where):
    answer = run(fake, sql)

    assert_refused(answer, "SYNTAX_ERROR", 1, where, "mismatched input ';'. Expecting: <EOF>")
    assert victim_rows(fake) == 3


@pytest.mark.parametrize(
    ("sql", "name", "where"),
    [
        ("SELECT * FROM read_csv('/etc/passwd')", "read_csv", "1:15"),
        ("SELECT * FROM read_csv_auto('/etc/passwd')", "read_csv_auto", "1:15"),
        ("SELECT * FROM READ_PARQUET('/srv/data/*.parquet')", "READ_PARQUET", "1:15"),
        ("SELECT * FROM read_json('https://example.com/x.json')", "read_json", "1:15"),
        ("SELECT content FROM read_text('/etc/hostname')", "read_text", "1:21"),
        ("SELECT content FROM read_blob('/etc/hostname')", "read_blob", "1:21"),
        ("SELECT * FROM glob('/etc/*')", "glob", "1:15"),
        ("SELECT * FROM \"read_csv\"('/etc/passwd')", "read_csv", "1:15"),
        ("SELECT * FROM main.read_csv('/etc/passwd')", "read_csv", "1:20"),
        ("SELECT a FROM victim WHERE a IN (SELECT 1 FROM read_csv ('/etc/passwd'))", "read_csv", "1:48"),
        # SQL in a string, run by DuckDB: what a reader's name could hide in.
        ("SELECT * FROM query('SELECT * FROM read_csv(''/etc/passwd'')')", "query", "1:15"),
        ("SELECT * FROM query_table('victim')", "query_table", "1:15"),
        ("EXECUTE IMMEDIATE 'SELECT * FROM read_csv(?)' USING '/etc/passwd'", "read_csv", "1:15"),
    ],
)
def test_duckdbs_readers_of_files_and_hosts_are_functions_trino_does_not_have(fake, sql, name, where):
    answer = run(fake, sql)

    assert_refused(answer, "FUNCTION_NOT_FOUND", 6, where, f"Function '{name}' not registered")


@pytest.mark.parametrize(
    ("sql", "token"),
    [
        ("COPY victim TO '/tmp/victim.csv'", "COPY"),
        ("copy victim from '/etc/passwd'", "copy"),
        ("ATTACH '/tmp/other.duckdb' AS other", "ATTACH"),
        ("INSTALL httpfs", "INSTALL"),
        ("LOAD httpfs", "LOAD"),
        ("FORCE INSTALL httpfs", "FORCE"),
        ("PRAGMA enable_profiling", "PRAGMA"),
        ("EXPORT DATABASE '/tmp/dump'", "EXPORT"),
        ("  -- a comment first\n  IMPORT DATABASE '/tmp/dump'", "IMPORT"),
        ("SET enable_external_access = true", "enable_external_access"),
    ],
)
def test_duckdbs_own_statements_are_syntax_errors(fake, sql, token):
    answer = run(fake, sql)

    error = answer["error"]
    assert (error["errorName"], error["errorType"], error["errorCode"]) == ("SYNTAX_ERROR", "USER_ERROR", 1)
    assert f"mismatched input '{token}'" in error["message"]


def test_a_file_named_in_place_of_a_table_is_a_syntax_error(fake):
    answer = run(fake, "SELECT * FROM '/etc/passwd'")

    assert answer["error"]["errorName"] == "SYNTAX_ERROR"
    assert "mismatched input ''/etc/passwd''" in answer["error"]["message"]


def test_names_in_literals_and_trinos_own_functions_are_fine(fake):
    answer = run(
        fake, "SELECT 'read_csv(''/etc/passwd'')' AS text, upper('glob') AS name, a FROM victim ORDER BY a"
    )

    assert "error" not in answer
    assert answer["data"][0] == ["read_csv('/etc/passwd')", "GLOB", 1]


def test_the_fakes_duckdb_reaches_no_file_and_keeps_its_configuration(fake):
    """Whatever a query names, DuckDB itself is opened so that it cannot read the host's
    files, nor be set back to reading them."""
    with pytest.raises(duckdb.PermissionException):
        fake.duckdb.execute("SELECT * FROM read_csv('/etc/passwd')")
    with pytest.raises(duckdb.Error):
        fake.duckdb.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error, match="lock"):
        fake.duckdb.execute("SET memory_limit = '1GB'")
    fake.load_table("more", pa.table({"b": [1]}))  # its own tables still load
    assert run(fake, "SELECT b FROM more")["data"] == [[1]]


def test_several_statements_and_a_wrong_parameter_count_are_refused_as_trino_does(fake):
    for body in ("SELECT 1; SELECT 2", "EXECUTE IMMEDIATE 'SELECT 1; SELECT 2'", "SELECT 1;"):
        answer = run(fake, body)
        assert answer["error"]["errorName"] == "SYNTAX_ERROR", body
        assert "mismatched input ';'" in answer["error"]["message"]
    counted = run(fake, "EXECUTE IMMEDIATE 'SELECT ? AS a' USING 1, 2")
    assert counted["error"]["errorName"] == "INVALID_PARAMETER_USAGE"
