"""The ingesters Conveyor ships, against a real HTTP server on a loopback address and real
files (a temporary directory, fsspec's memory store): batches that follow each other by
their session alone, every record once and in order, and failures sorted into transient
and permanent with messages that say where and what."""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import uuid
from typing import Any

import pytest
from django.test import override_settings
from fsspec.core import url_to_fs
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.serializers import ValidationError

from ingest.runs.errors import SourceError
from ingest.runs.ingesters import Fetched, get, kinds, validate_config
from tests.support.http_source import Route, SourceServer

MEMORY_ROOT = "memory://ingest-tests"
# The tenant whose sources these are: a files source reads only <root>/<tenant slug>/.
TENANT = "acme"


# --- helpers ----------------------------------------------------------------------------------


def drain(kind: str, config: dict[str, Any], batch_size: int, limit: int = 500) -> list[Fetched]:
    """Every batch of a source, each fetched from the session of the one before."""
    ingester = get(kind)
    batches = [ingester.fetch(config, {}, batch_size, tenant=TENANT)]
    while batches[-1].has_more:
        assert len(batches) < limit, "the source does not end"
        batches.append(ingester.fetch(config, batches[-1].session, batch_size, tenant=TENANT))
    return batches


def records_of(batches: list[Fetched]) -> list[dict[str, Any]]:
    return [record for batch in batches for record in batch.records]


def failure(
    kind: str, config: dict[str, Any], session: dict[str, Any] | None = None, batch_size: int = 10
) -> SourceError:
    with pytest.raises(SourceError) as caught:
        get(kind).fetch(config, session or {}, batch_size, tenant=TENANT)
    return caught.value


def refused(kind: str, config: Any) -> dict[str, Any]:
    with pytest.raises(ValidationError) as caught:
        validate_config(kind, config, tenant=TENANT)
    return caught.value.detail


def paged(
    server: SourceServer,
    pages: list[list[dict[str, Any]]],
    cursors: list[str] | None = None,
    path: str | None = None,
) -> str:
    """A cursor-paged API at a fresh path serving ``pages`` (cursor i+1 names page i+1)."""
    cursors = cursors or [f"p{index}" for index in range(1, len(pages))]
    page_of = {None: 0, **{cursor: index + 1 for index, cursor in enumerate(cursors)}}

    def respond(query: dict[str, str]) -> Route:
        index = page_of.get(query.get("cursor"))
        if index is None:
            return Route(400, b'{"error": "unknown cursor"}')
        following = cursors[index] if index < len(cursors) else None
        return Route(200, json.dumps({"items": pages[index], "next_cursor": following}).encode())

    return server.answer(path or f"/{uuid.uuid4().hex}", respond)


def serve(server: SourceServer, body: bytes | dict[str, Any]) -> str:
    """A fresh path answering any query with ``body``."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return server.answer(f"/{uuid.uuid4().hex}", lambda query: Route(200, body))


def write_csv(rows: list[dict[str, str]], header: list[str]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, header)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def write_jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row, ensure_ascii=False).encode() + b"\n" for row in rows)


@pytest.fixture(scope="module")
def server():
    with SourceServer() as running:
        yield running


@pytest.fixture
def loopback(settings):
    """The test server's address is on the allow-list."""
    settings.INTAKE_HTTP_ALLOW = ["127.0.0.1"]


@pytest.fixture
def roots(settings, tmp_path):
    """The tenant's own directory under a root (what its sources may read); the root
    itself is ``roots.parent``."""
    settings.INGEST_FILE_ROOTS = [str(tmp_path), MEMORY_ROOT]
    area = tmp_path / TENANT
    area.mkdir()
    return area


@pytest.fixture
def memory_dir():
    """A fresh directory in fsspec's memory store, removed afterwards."""
    url = f"{MEMORY_ROOT}/{TENANT}/{uuid.uuid4().hex}"
    fs, path = url_to_fs(url)
    yield url, fs, path
    if fs.exists(path):
        fs.rm(path, recursive=True)


# --- the registry -----------------------------------------------------------------------------


def test_both_kinds_are_registered_with_their_labels():
    assert {
        ("files", "Files in a directory or an fsspec URL"),
        ("http_json", "HTTP JSON with cursor pagination"),
    } <= set(kinds())
    assert refused("ftp", {}) == {"kind": ["no ingester of kind 'ftp'"]}


# --- HTTP JSON ------------------------------------------------------------------------------


def test_a_cursor_paged_api_is_read_page_by_page_until_its_cursor_ends(server, loopback):
    pages = [[{"id": "1"}, {"id": "2"}], [{"id": "3"}, {"id": "4"}], [{"id": "5"}]]
    url = paged(server, pages)
    path = url.removeprefix(server.url(""))

    batches = drain("http_json", {"url": url}, 2)

    assert [batch.records for batch in batches] == pages
    assert [(batch.session, batch.has_more) for batch in batches] == [
        ({"cursor": "p1"}, True),
        ({"cursor": "p2"}, True),
        ({}, False),
    ]
    assert [hit for hit in server.hits if hit.startswith(path)] == [
        f"{path}?limit=2",
        f"{path}?cursor=p1&limit=2",
        f"{path}?cursor=p2&limit=2",
    ]


def test_the_config_names_the_params_and_dotted_fields_and_the_url_keeps_its_own_query(server, loopback):
    def respond(query: dict[str, str]) -> Route:
        body = {
            "data": {"rows": [{"n": query.get("after", "first")}]},
            "meta": {"next": None if "after" in query else "x y+z"},
        }
        return Route(200, json.dumps(body).encode())

    url = server.answer("/shaped", respond) + "?kind=orders"
    config = validate_config(
        "http_json",
        {
            "url": url,
            "items_field": "data.rows",
            "cursor_field": "meta.next",
            "cursor_param": "after",
            "limit_param": "per_page",
        },
        tenant=TENANT,
    )

    assert records_of(drain("http_json", config, 7)) == [{"n": "first"}, {"n": "x y+z"}]
    assert server.hits[-1] == "/shaped?kind=orders&after=x+y%2Bz&per_page=7"


def test_a_retried_batch_fetches_the_same_records(server, loopback):
    url = paged(server, [[{"id": "a"}], [{"id": "b"}], []])
    first = get("http_json").fetch({"url": url}, {"cursor": "p1"}, 1, tenant=TENANT)

    assert (
        get("http_json").fetch({"url": url}, {"cursor": "p1"}, 1, tenant=TENANT)
        == first
        == Fetched([{"id": "b"}], {"cursor": "p2"}, True)
    )


def test_numbers_keep_their_exact_text_and_a_key_field_is_required_of_each_item(server, loopback):
    url = serve(server, b'{"items": [{"id": 1, "price": 12.50}]}')
    assert get("http_json").fetch({"url": url, "key_field": "id"}, {}, 5, tenant=TENANT).records == [
        {"id": "1", "price": "12.50"}
    ]

    url = serve(server, {"items": [{"id": "1"}, {"id": None}]})
    error = failure("http_json", {"url": url, "key_field": "id"})
    assert not error.transient
    assert "without its key field 'id' (item 2 of 2)" in str(error)


def test_a_cursor_answered_with_itself_is_refused_as_a_loop(server, loopback):
    url = serve(server, {"items": [], "next_cursor": "again"})

    error = failure("http_json", {"url": url}, {"cursor": "again"})

    assert not error.transient
    assert str(error) == (
        f"{url} answered the cursor 'again' with the same cursor again: its pages would loop"
    )


@pytest.mark.parametrize(
    "status, transient, reason",
    [
        (503, True, "503 Service Unavailable"),
        (429, True, "429 Too Many Requests"),
        (500, True, "500 Internal Server Error"),
        (404, False, "404 Not Found"),
        (401, False, "401 Unauthorized"),
    ],
)
def test_http_failures_are_sorted_and_named_without_the_query(server, loopback, status, transient, reason):
    path = f"/{uuid.uuid4().hex}"
    server.answer(path, lambda query: Route(status, b"{}"))
    url = server.url(path)

    error = failure("http_json", {"url": f"{url}?token=s3cret"})

    assert error.transient is transient
    assert str(error) == f"{url} answered {reason}"


def test_an_unreachable_host_and_a_slow_answer_are_transient(server, loopback, settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/items"
    error = failure("http_json", {"url": closed})
    assert error.transient and str(error) == f"could not connect to {closed}"

    settings.INGEST_HTTP_DEADLINE_SECONDS = 0.2
    path = f"/{uuid.uuid4().hex}"
    server.answer(path, lambda query: Route(200, b'{"items": []}', delay=0.6))
    error = failure("http_json", {"url": server.url(path)})
    assert error.transient and str(error) == f"{server.url(path)} did not answer within 0.2 s"


@pytest.mark.parametrize(
    "body, problem",
    [
        (b"<html>busy</html>", "did not send valid JSON: Expecting value"),
        (b'[{"id": "1"}]', "did not send a JSON object"),
        (b'{"records": []}', "sent no 'items' field"),
        (b'{"items": {"id": "1"}}', "sent a 'items' that is not a list of JSON objects"),
        (b'{"items": [{"id": "1"}, "2"]}', "sent a 'items' that is not a list of JSON objects"),
        (b'{"items": [{}, {}, {}]}', "sent 3 items when asked for at most 2 (with the 'limit' parameter)"),
        (b'{"items": [], "next_cursor": {"page": 2}}', "sent a 'next_cursor' that is not a string"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_a_permanent_error(server, loopback, body, problem):
    url = serve(server, body)

    error = failure("http_json", {"url": url}, batch_size=2)

    assert not error.transient
    assert str(error).startswith(f"{url} {problem}")


def test_a_body_or_a_cursor_over_its_bound_is_a_permanent_error(server, loopback, settings):
    settings.INGEST_MAX_SESSION_BYTES = 64
    url = serve(server, {"items": [], "next_cursor": "c" * 100})
    error = failure("http_json", {"url": url})
    assert not error.transient and "more than the 64 allowed" in str(error)

    settings.INGEST_MAX_BATCH_BYTES = 1024
    url = serve(server, {"items": [{"text": "x" * 2000}]})
    error = failure("http_json", {"url": url})
    assert not error.transient and str(error) == f"{url} sent more than 1 kB"


def test_a_session_it_did_not_write_is_refused(server, loopback):
    error = failure("http_json", {"url": server.url("/x")}, {"cursor": 3})
    assert not error.transient and "which this source did not write" in str(error)


def test_the_http_config_gets_its_defaults(server, loopback):
    assert validate_config("http_json", {"url": server.url("/items")}, tenant=TENANT) == {
        "url": server.url("/items"),
        "items_field": "items",
        "cursor_field": "next_cursor",
        "cursor_param": "cursor",
        "limit_param": "limit",
    }


@pytest.mark.parametrize(
    "config, errors",
    [
        (
            {"url": "https://api.example.com/x", "page_size": 5},
            {"page_size": ["is not a setting of this kind of source"]},
        ),
        ({"url": "ftp://example.com/x"}, {"url": ["must be an http:// or https:// URL"]}),
        ({}, {"url": ["This field is required."]}),
        (
            {"url": "https://api.example.com/x", "items_field": "data..items"},
            {"items_field": ["must be a field name or a dotted path such as data.items"]},
        ),
        (
            {"url": "https://api.example.com/x", "limit_param": "cursor"},
            {"limit_param": ["must differ from cursor_param"]},
        ),
    ],
)
def test_a_bad_http_config_is_refused_field_by_field(settings, config, errors):
    settings.INTAKE_HTTP_ALLOW = []
    assert refused("http_json", config) == errors


def test_a_url_outside_the_allowed_addresses_is_refused_when_saved(server, settings):
    settings.INTAKE_HTTP_ALLOW = []
    assert refused("http_json", {"url": server.url("/items")}) == {
        "url": ["is not allowed: its host is not a public internet address"]
    }


# --- files --------------------------------------------------------------------------------------


def test_files_are_read_in_path_order_with_batches_spanning_them(roots):
    (roots / "a.jsonl").write_bytes(write_jsonl([{"n": "1"}, {"n": "2"}, {"n": "3"}]))
    (roots / "b.ndjson").write_bytes(b'{"n": "4"}\n\n{"n": "5"}')  # a blank line, no final newline
    (roots / "c.csv").write_bytes(b'n,note\r\n6,"two\r\nlines"\r\n7,x\r\n')
    (roots / "d.json").write_bytes(b'[{"n": "8"}]')

    batches = drain("files", {"url": str(roots)}, 2)

    assert [batch.records for batch in batches] == [
        [{"n": "1"}, {"n": "2"}],
        [{"n": "3"}, {"n": "4"}],
        [{"n": "5"}, {"n": "6", "note": "two\r\nlines"}],
        [{"n": "7", "note": "x"}, {"n": "8"}],
    ]
    assert [batch.session for batch in batches] == [
        {"file": "a.jsonl", "offset": 2, "position": 22, "line": 2},
        {"file": "b.ndjson", "offset": 1, "position": 11, "line": 1},
        {"file": "c.csv", "offset": 1, "position": 24, "line": 3},
        {},
    ]
    assert [batch.has_more for batch in batches] == [True, True, True, False]


def test_a_retried_batch_reads_the_same_records_and_a_batch_ending_a_file_goes_on(roots):
    (roots / "a.jsonl").write_bytes(write_jsonl([{"n": "1"}, {"n": "2"}]))
    (roots / "b.csv").write_bytes(b"n\n3\n")
    files = get("files")

    first = files.fetch({"url": str(roots)}, {}, 2, tenant=TENANT)
    assert first == Fetched(
        [{"n": "1"}, {"n": "2"}], {"file": "a.jsonl", "offset": 2, "position": 22, "line": 2}, True
    )
    for _ in range(2):
        assert files.fetch({"url": str(roots)}, first.session, 2, tenant=TENANT) == Fetched(
            [{"n": "3"}], {}, False
        )


def test_a_file_added_during_a_run_is_read_if_it_sorts_after_the_current_one(roots):
    (roots / "b.jsonl").write_bytes(write_jsonl([{"n": "b1"}, {"n": "b2"}]))
    (roots / "d.jsonl").write_bytes(write_jsonl([{"n": "d1"}]))
    files = get("files")
    first = files.fetch({"url": str(roots)}, {}, 1, tenant=TENANT)

    (roots / "a.jsonl").write_bytes(write_jsonl([{"n": "a1"}]))  # before the current file: too late
    (roots / "c.jsonl").write_bytes(write_jsonl([{"n": "c1"}]))
    rest = [first]
    while rest[-1].has_more:
        rest.append(files.fetch({"url": str(roots)}, rest[-1].session, 1, tenant=TENANT))

    assert records_of(rest) == [{"n": "b1"}, {"n": "b2"}, {"n": "c1"}, {"n": "d1"}]


def test_a_pattern_and_a_format_choose_and_read_the_files(roots):
    (roots / "sub").mkdir()
    (roots / "sub" / "x.txt").write_bytes(write_jsonl([{"n": "1"}]))
    (roots / "sub" / "y.txt").write_bytes(write_jsonl([{"n": "2"}]))
    (roots / "z.txt").write_bytes(b"not read")

    config = validate_config(
        "files", {"url": str(roots), "pattern": "sub/*.txt", "format": "jsonl"}, tenant=TENANT
    )

    assert records_of(drain("files", config, 5)) == [{"n": "1"}, {"n": "2"}]
    error = failure("files", {"url": str(roots), "pattern": "*.txt"})
    assert not error.transient and error.args[0].startswith("z.txt: cannot tell its format")


def test_a_memory_store_is_read_like_a_directory(roots, memory_dir):
    url, fs, path = memory_dir
    fs.pipe(f"{path}/2.csv", "\ufeffk\nc\n".encode())
    fs.pipe(f"{path}/1.jsonl", write_jsonl([{"k": "a"}, {"k": "b"}]))

    assert records_of(drain("files", {"url": url}, 2)) == [{"k": "a"}, {"k": "b"}, {"k": "c"}]


def test_an_empty_directory_is_an_empty_source_and_a_missing_one_an_error(roots):
    assert get("files").fetch({"url": str(roots)}, {}, 3, tenant=TENANT) == Fetched([], {}, False)

    error = failure("files", {"url": str(roots / "gone")})
    assert not error.transient and str(error) == f"{roots / 'gone'} is not a directory"


@pytest.mark.parametrize(
    "name, body, problem",
    [
        ("b.jsonl", b'{"n": "1"}\n{"n": \n', "b.jsonl, line 2: not valid JSON (Expecting value"),
        ("b.jsonl", b'{"n": "1"}\n\n["n"]\n', "b.jsonl, line 3: not a JSON object"),
        ("b.jsonl", b'{"n": "\xff"}\n', "b.jsonl, line 1: not valid JSON"),
        ("b.csv", b"n,m\n1,2\n3\n", "b.csv, line 3: 1 fields where the header has 2"),
        ("b.csv", b"n,n\n1,2\n", "b.csv, line 1: the header row needs a distinct, non-empty name"),
        ("b.csv", b'n\n"1"x\n', "b.csv, line 2: not valid CSV"),
        ("b.csv", b"n\n\xff\n", "b.csv, line 2: not UTF-8"),
        ("b.json", b'[{"n": "1"}, 2]', "b.json, item 2: not a JSON object"),
        ("b.json", b'{"n": "1"}', "b.json, the whole file: not a JSON array of objects"),
    ],
)
def test_a_malformed_record_is_a_permanent_error_naming_file_and_line(roots, name, body, problem):
    (roots / "a.jsonl").write_bytes(write_jsonl([{"n": "0"}]))
    (roots / name).write_bytes(body)

    error = failure("files", {"url": str(roots)}, {"file": "a.jsonl", "offset": 1})

    assert not error.transient
    assert str(error).startswith(problem)


def test_records_are_bounded_in_size_and_batches_in_bytes(roots, settings):
    settings.INGEST_MAX_BATCH_BYTES = 64
    rows = [{"n": str(index) * 20} for index in range(1, 6)]  # 31 bytes a line
    (roots / "a.jsonl").write_bytes(write_jsonl(rows))

    batches = drain("files", {"url": str(roots)}, 10)

    assert [len(batch.records) for batch in batches] == [2, 2, 1]
    assert records_of(batches) == rows

    (roots / "b.jsonl").write_bytes(b'{"n": "' + b"x" * 100 + b'"}\n')
    error = failure("files", {"url": str(roots)}, {"file": "a.jsonl", "offset": 5})
    assert not error.transient
    assert str(error) == "b.jsonl, line 1: a line longer than the 64 bytes a record may take"


def test_a_file_gone_during_a_run_is_transient_and_so_is_an_unreachable_store(roots, monkeypatch):
    (roots / "a.jsonl").write_bytes(write_jsonl([{"n": "1"}, {"n": "2"}]))
    first = get("files").fetch({"url": str(roots)}, {}, 1, tenant=TENANT)
    (roots / "a.jsonl").unlink()

    error = failure("files", {"url": str(roots)}, first.session)
    assert error.transient and str(error) == f"{roots}: a.jsonl, the file in progress, is gone"

    (roots / "a.jsonl").write_bytes(b"{}\n")
    monkeypatch.setattr(
        "fsspec.implementations.local.LocalFileSystem.open",
        lambda *args, **kwargs: (_ for _ in ()).throw(ConnectionResetError("reset")),
    )
    error = failure("files", {"url": str(roots)})
    assert error.transient and str(error) == f"{roots}: the store could not be read (reset)"

    monkeypatch.setattr(
        "fsspec.implementations.local.LocalFileSystem.open",
        lambda *args, **kwargs: (_ for _ in ()).throw(PermissionError("no")),
    )
    error = failure("files", {"url": str(roots)})
    assert not error.transient and str(error) == f"{roots}: permission denied (no)"


def test_the_files_config_gets_its_defaults(roots):
    assert validate_config("files", {"url": str(roots)}, tenant=TENANT) == {"url": str(roots), "pattern": "*"}


@pytest.mark.parametrize(
    "url",
    [
        "/etc",
        "{root}/../elsewhere",
        "{root}/sub/../../elsewhere",
        "memory://other",
        "memory://ingest-tests-2",
        "memory://ingest-tests/../x",
        "file:///etc",
        "relative/dir",
        # The root that holds every tenant's directory, another tenant's, and one whose slug
        # merely starts with this tenant's.
        "{base}",
        "{base}/beta",
        "{root}-2",
        "memory://ingest-tests",
        "memory://ingest-tests/beta",
        "memory://ingest-tests/acme-2/x",
    ],
)
def test_a_url_outside_the_tenants_directory_is_refused_naming_it(roots, url):
    errors = refused("files", {"url": url.format(root=roots, base=roots.parent)})["url"]

    assert len(errors) == 1
    assert errors[0] in (
        f"must lie in this tenant's directory: {roots}, {MEMORY_ROOT}/{TENANT}",
        "must not contain '..'",
        "must be an absolute directory path or a URL such as s3://bucket/dir",
    )


@pytest.mark.parametrize(
    "config, errors",
    [
        (
            {"url": "{root}", "pattern": "../*"},
            {"pattern": ["must be a glob relative to the url, without '..'"]},
        ),
        (
            {"url": "{root}", "pattern": "/etc/*"},
            {"pattern": ["must be a glob relative to the url, without '..'"]},
        ),
        ({"url": "{root}", "format": "xml"}, {"format": ['"xml" is not a valid choice.']}),
        ({"url": "{root}", "recursive": True}, {"recursive": ["is not a setting of this kind of source"]}),
        ({"url": "{root}", "pattern": 5}, {"pattern": ["must be text, not a number"]}),
        (
            {"url": ["{root}"], "pattern": True, "depth": 1},
            {
                "depth": ["is not a setting of this kind of source"],
                "pattern": ["must be text, not true or false"],
                "url": ["must be text, not a list"],
            },
        ),
        (
            {"url": "memory://ingest-tests/a::file:///etc"},
            {"url": ["must be a single URL, not a chain of fsspec URLs"]},
        ),
        (
            {"url": "nosuchfs://ingest-tests/x"},
            {"url": ["must lie in this tenant's directory: {root}, memory://ingest-tests/acme"]},
        ),
    ],
)
def test_a_bad_files_config_is_refused_field_by_field(roots, config, errors):
    config = {
        key: value.format(root=roots) if isinstance(value, str) else value for key, value in config.items()
    }
    expected = {key: [message.format(root=roots) for message in messages] for key, messages in errors.items()}
    assert refused("files", config) == expected


def test_no_file_source_is_allowed_without_roots_and_a_saved_one_is_checked_again(roots, settings):
    (roots / "a.jsonl").write_bytes(b"{}\n")
    settings.INGEST_FILE_ROOTS = []

    assert refused("files", {"url": str(roots)}) == {
        "url": ["cannot be used: no directory is open to file sources (INGEST_FILE_ROOTS)"]
    }
    error = failure("files", {"url": str(roots)})
    assert not error.transient and "no directory is open to file sources" in str(error)


def test_a_root_on_a_filesystem_this_deployment_lacks_is_refused(settings):
    settings.INGEST_FILE_ROOTS = ["nosuchfs://bucket"]

    assert refused("files", {"url": f"nosuchfs://bucket/{TENANT}/in"})["url"][0].startswith(
        "needs the nosuchfs:// filesystem, which this deployment does not have"
    )


def test_symbolic_links_are_judged_by_where_they_lead(roots, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.jsonl").write_bytes(b'{"secret": "1"}\n')
    os.symlink(outside, roots / "door")
    os.symlink(outside / "secret.jsonl", roots / "a.jsonl")

    assert refused("files", {"url": str(roots / "door")})["url"][0].startswith(
        "must lie in this tenant's directory"
    )
    error = failure("files", {"url": str(roots)})
    assert not error.transient
    assert str(error) == f"{roots}: a.jsonl links to a file outside the source's directory"


# --- properties -------------------------------------------------------------------------------

VALUES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
RECORDS = st.fixed_dictionaries({"k": VALUES, "v": VALUES})
FORMATS = st.sampled_from(["jsonl", "csv", "json"])


def encoded(rows: list[dict[str, str]], fmt: str) -> bytes:
    if fmt == "csv":
        return write_csv(rows, ["k", "v"])
    return json.dumps(rows).encode() if fmt == "json" else write_jsonl(rows)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.lists(st.tuples(st.lists(RECORDS, max_size=6), FORMATS), max_size=5),
    batch_size=st.integers(1, 8),
)
def test_any_files_in_any_batches_give_every_record_once_in_order(files, batch_size):
    url = f"{MEMORY_ROOT}/{TENANT}/{uuid.uuid4().hex}"
    fs, root = url_to_fs(url)
    assert isinstance(fs, MemoryFileSystem)
    fs.mkdir(root)
    for index, (rows, fmt) in enumerate(files):
        fs.pipe(f"{root}/{index:02}.{fmt}", encoded(rows, fmt))
    expected = [row for rows, _ in files for row in rows]
    try:
        with override_settings(INGEST_FILE_ROOTS=[MEMORY_ROOT]):
            batches = drain("files", {"url": url}, batch_size)
            again = [
                get("files").fetch({"url": url}, before.session, batch_size, tenant=TENANT)
                for before in batches[:-1]
            ]
    finally:
        fs.rm(root, recursive=True)

    assert records_of(batches) == expected
    assert [batch.has_more for batch in batches] == [True] * (len(batches) - 1) + [False]
    assert all(0 < len(batch.records) <= batch_size for batch in batches) or expected == []
    assert again == batches[1:]


@st.composite
def page_layouts(draw) -> tuple[int, list[list[dict[str, str]]], list[str]]:
    batch_size = draw(st.integers(1, 5))
    pages = draw(st.lists(st.lists(RECORDS, max_size=batch_size), min_size=1, max_size=6))
    cursors = draw(
        st.lists(
            st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8),
            min_size=len(pages) - 1,
            max_size=len(pages) - 1,
            unique=True,
        )
    )
    return batch_size, pages, cursors


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=page_layouts())
def test_any_page_layout_gives_every_record_once_in_order(server, layout):
    batch_size, pages, cursors = layout
    url = paged(server, pages, cursors)

    with override_settings(INTAKE_HTTP_ALLOW=["127.0.0.1"]):
        batches = drain("http_json", {"url": url}, batch_size)

    assert [batch.records for batch in batches] == pages
    assert [batch.has_more for batch in batches] == [True] * (len(pages) - 1) + [False]


# --- one tenant's files are not another's -----------------------------------------------------


def test_a_source_cannot_read_another_tenants_directory_when_saved_or_when_run(roots):
    beta = roots.parent / "beta"
    beta.mkdir()
    (beta / "b.jsonl").write_bytes(write_jsonl([{"secret": "of beta"}]))

    assert refused("files", {"url": str(beta)})["url"][0].startswith("must lie in this tenant's directory")
    # Saved before the rule, or written behind the form's back: refused again at every batch.
    error = failure("files", {"url": str(beta)})
    assert not error.transient and "must lie in this tenant's directory" in str(error)
    assert get("files").fetch({"url": str(beta)}, {}, 5, tenant="beta").records == [{"secret": "of beta"}]


def test_a_source_on_the_root_cannot_glob_every_tenants_files(roots):
    (roots / "a.jsonl").write_bytes(write_jsonl([{"n": "mine"}]))
    (roots.parent / "beta").mkdir()
    (roots.parent / "beta" / "b.jsonl").write_bytes(write_jsonl([{"n": "beta's"}]))
    config = {"url": str(roots.parent), "pattern": "**/*.jsonl"}

    assert "url" in refused("files", config)
    assert not failure("files", config).transient
    assert records_of(drain("files", {"url": str(roots), "pattern": "**/*.jsonl"}, 10)) == [{"n": "mine"}]


@pytest.mark.parametrize("slug", ["", ".", "..", "a/b", "../beta"])
def test_only_a_slug_names_a_tenants_directory(roots, slug):
    with pytest.raises(SourceError) as caught:
        get("files").fetch({"url": str(roots)}, {}, 5, tenant=slug)
    assert not caught.value.transient and "is not a tenant's slug" in str(caught.value)
