"""Bounded work per request, over a real web process and raw sockets: a scrape sync of
30 MB of tiny items is refused before it becomes objects (the process grew by 916 MB
when the body was decoded whole), and a connection that sends its request head too
slowly is closed at the head's deadline; an export worker's completion naming thousands
of files passes the body limiter on the worker's token; a user's open event streams are
capped across web processes."""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from exports import services
from exports.models import ExportJob, JobStatus
from exports.services import MAX_FILE_PATH, MAX_RESULT_FILES
from ingest.scraping.models import ScrapeReference, ScrapeRun
from jobs.testing import wait_until
from tests.support.base import granted, make_job, operating, staff, tenant
from tests.support.exports.builders import snapshot
from tests.support.ingest import builders
from tests.system.test_web_limits import Answer, _headers, memory_kb, read_answer

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

MB = 1024 * 1024
RSS_GROWTH_BOUND_MB = 64
BODY_BYTES = 30 * MB


def post_json(port: int, path: str, pieces: Iterator[bytes], length: int, token: str) -> Answer:
    """POST a ``length``-byte JSON body made of ``pieces``, stopping as soon as the server
    answers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(
        (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            f"\r\nContent-Length: {length}\r\nAuthorization: Token {token}\r\n\r\n"
        ).encode()
    )
    sent = 0
    try:
        for piece in pieces:
            if select.select([sock], [], [], 0)[0]:
                break
            sock.sendall(piece)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return read_answer(sock, sent)


def items_body(head: bytes, item: bytes, tail: bytes, total: int) -> tuple[Iterator[bytes], int]:
    """``head``, then ``item`` joined by commas, then ``tail``: exactly ``total`` bytes
    (the last item padded with spaces), made on the fly in 256 kB pieces."""
    count = (total - len(head) - len(tail) + 1) // (len(item) + 1)
    padding = total - len(head) - len(tail) - (count * (len(item) + 1) - 1)

    def pieces() -> Iterator[bytes]:
        yield head
        per_piece = 256 * 1024 // (len(item) + 1)
        left = count
        while left > 0:
            n = min(per_piece, left)
            left -= n
            yield b",".join([item] * n) + (b"," if left else b" " * padding)
        yield tail

    return pieces(), total


EMPTY_ITEMS = {
    # What a sync refuses at the first item past SCRAPE_MAX_REFERENCES (50,000).
    "references with empty payloads": (
        b'{"scrape_run_id": "r", "references": [',
        b'{"external_id": "x", "payload": {}}',
        b"]}",
        413,
        "at least 50,001 references",
    ),
    # One reference whose payload is a list of 15 million empty objects.
    "one payload of empty objects": (
        b'{"scrape_run_id": "r", "references": [{"external_id": "x", "payload": {"a": [',
        b"{}",
        b"]}}]}",
        400,
        "more than 100,000 values",
    ),
    # Not even an object: a top-level array of empty objects.
    "an array of empty objects": (b"[", b"{}", b"]", 400, "more than 100,000 values"),
}


@pytest.mark.parametrize("case", list(EMPTY_ITEMS))
def test_a_30_mb_sync_of_empty_items_is_refused_with_the_web_process_growing_by_less_than_64_mb(
    processes, case
):
    head, item, tail, status, detail = EMPTY_ITEMS[case]
    acme = tenant("Acme")
    builders.source(acme, name="listings", kind="scraped_reference", config={})
    token = Token.objects.create(user=granted(staff("scraper", of=acme), "ingest.add_scrapereference")).key
    web, port = processes.web()
    warm_up = json.dumps(
        {
            "scrape_run_id": "warm",
            "references": [{"external_id": str(n), "payload": {"n": n}} for n in range(100)],
        }
    ).encode()
    answer = post_json(port, "/scraping/listings/sync", iter([warm_up]), len(warm_up), token)
    assert answer.status == 200, answer
    before = memory_kb(web.pid, "VmRSS")

    pieces, length = items_body(head, item, tail, BODY_BYTES)
    started = time.monotonic()
    answer = post_json(port, "/scraping/listings/sync", pieces, length, token)
    seconds = time.monotonic() - started
    growth_mb = (memory_kb(web.pid, "VmHWM") - before) / 1024

    print(
        f"{case}: {answer.status} after {answer.sent / MB:.1f} MB sent in {seconds:.1f} s; "
        f"web RSS {before / 1024:.0f} MB, growth to its peak {growth_mb:.1f} MB"
    )
    assert answer.status == status, answer
    assert detail in answer.body.decode()
    assert growth_mb < RSS_GROWTH_BOUND_MB
    assert not ScrapeRun.objects.exclude(run_id="warm").exists()
    assert ScrapeReference.objects.count() == 100


# --- the export workers' reports ---------------------------------------------------------------------

WORKER_TOKEN = "t" * 43


def worker_post(port: int, path: str, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {WORKER_TOKEN}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def head_only(port: int, path: str, length: int, token: str) -> Answer:
    """The answer to a POST's head that announces ``length`` bytes of body, none sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            f"\r\nContent-Length: {length}\r\nAuthorization: Bearer {token}\r\n\r\n"
        ).encode()
    )
    return read_answer(sock)


@pytest.mark.parametrize("files, length", [(1_500, 80), (MAX_RESULT_FILES, MAX_FILE_PATH)])
def test_a_report_of_many_files_passes_the_body_limiter_and_completes_the_job(processes, files, length):
    snapshot()
    _, port = processes.web(processes.env(EXPORTS_WORKER_TOKEN=WORKER_TOKEN))
    status, claimed = worker_post(
        port, "/internal/jobs/claim", {"worker": "w", "limit": 1, "queues": ["exports"]}
    )
    assert status == 200, claimed
    (job,) = claimed["jobs"]
    # Paths relative to the job's folder, each ``length`` characters long.
    names = [f"part-{n:0{length - len('part-')}d}" for n in range(files)]
    completion = {
        "worker": "w",
        "lease": claimed["lease"],
        "result": {"rows": files, "bytes": files, "files": names},
    }
    assert len(json.dumps(completion)) > settings.WEB_MAX_ANONYMOUS_BODY_BYTES
    path = f"/internal/jobs/{job['id']}/complete"
    # Under a token that is no credential's, the limiter refuses it from its head alone.
    assert head_only(port, path, len(json.dumps(completion)), "x" * 43).status == 401

    status, answer = worker_post(port, path, completion)

    assert status == 200, answer
    assert answer["job"]["state"] == "succeeded"
    export = ExportJob.objects.get(job_id=job["id"])
    assert (export.status, len(export.files)) == (JobStatus.COMPLETED, files)
    assert services.shown_files(export)[-1].endswith("/" + names[-1])


# --- the request head's deadline ---------------------------------------------------------------------

HEAD_TIMEOUT = 1.0
TRICKLE_EVERY = 0.2


class Conn:
    """A client connection that may trickle its head one byte at a time."""

    def __init__(self, port: int, first: bytes = b"") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setblocking(False)
        self.received = b""
        self.closed_at: float | None = None
        if first:
            self.sock.sendall(first)

    def read(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            chunk = b""
        if chunk:
            self.received += chunk
        else:
            self.closed_at = time.monotonic()
            self.sock.close()

    def trickle(self) -> None:
        try:
            self.sock.send(b"a")
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            pass


def until_closed(conns: list[Conn], deadline: float, *, trickle: list[Conn] | None = None) -> None:
    """Reads every connection until each is closed by the server or ``deadline`` (a
    monotonic time) passes, sending one more header byte on each of ``trickle`` every
    TRICKLE_EVERY."""
    next_trickle = time.monotonic() + TRICKLE_EVERY
    while time.monotonic() < deadline:
        open_ = [c for c in conns if c.closed_at is None]
        if not open_:
            return
        wait = max(0.0, min(deadline, next_trickle) - time.monotonic())
        for conn in select.select([c.sock for c in open_], [], [], wait)[0] and open_:
            conn.read()
        if time.monotonic() >= next_trickle:
            for conn in (c for c in trickle or () if c.closed_at is None):
                conn.trickle()
            next_trickle += TRICKLE_EVERY


def until_answered(conn: Conn, deadline: float) -> None:
    """Reads ``conn`` until a whole response (by its Content-Length) is in."""
    while time.monotonic() < deadline and conn.closed_at is None:
        head, found, body = conn.received.partition(b"\r\n\r\n")
        if found and len(body) >= int(_headers(head).get("content-length", 0)):
            return
        select.select([conn.sock], [], [], deadline - time.monotonic())
        conn.read()


def status_of(received: bytes) -> int | None:
    return int(received.split()[1]) if received.startswith(b"HTTP/1.1 ") else None


def test_connections_sending_their_head_slowly_are_answered_408_and_closed_at_the_deadline(processes):
    _, port = processes.web(processes.env(WEB_HEADER_TIMEOUT_SECONDS=str(HEAD_TIMEOUT)))
    started = time.monotonic()
    slow = [Conn(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ") for _ in range(100)]
    idle = [Conn(port) for _ in range(20)]  # never send a byte

    until_closed(slow + idle, started + HEAD_TIMEOUT + 10, trickle=slow)

    assert all(c.closed_at is not None for c in slow + idle), "connections outlived the deadline"
    assert min(c.closed_at for c in slow + idle) - started >= HEAD_TIMEOUT * 0.9
    assert {status_of(c.received) for c in slow} == {408}
    detail = json.loads(slow[0].received.partition(b"\r\n\r\n")[2])
    assert detail == {
        "detail": "The request line and headers did not arrive within 1 s.",
        "limit": HEAD_TIMEOUT,
    }
    assert {c.received for c in idle} == {b""}


def test_the_next_request_on_a_kept_alive_connection_has_the_same_deadline(processes):
    _, port = processes.web(processes.env(WEB_HEADER_TIMEOUT_SECONDS=str(HEAD_TIMEOUT)))
    conn = Conn(port, b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    until_answered(conn, time.monotonic() + 10)
    assert status_of(conn.received) == 404 and conn.closed_at is None
    conn.received = b""
    conn.sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    sent_at = time.monotonic()

    until_closed([conn], sent_at + HEAD_TIMEOUT + 10, trickle=[conn])

    assert conn.closed_at is not None and status_of(conn.received) == 408
    assert conn.closed_at - sent_at >= HEAD_TIMEOUT * 0.9


def test_a_complete_head_with_a_slow_body_is_not_cut_off_by_the_head_deadline(processes):
    _, port = processes.web(processes.env(WEB_HEADER_TIMEOUT_SECONDS=str(HEAD_TIMEOUT)))
    body = b'{"type": "tests.noop"}'
    conn = Conn(
        port,
        b"POST /api/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body),
    )
    for byte in body[:-1]:  # over twice the head's deadline
        conn.sock.sendall(bytes([byte]))
        time.sleep(2 * HEAD_TIMEOUT / len(body))
    conn.sock.sendall(body[-1:])

    until_closed([conn], time.monotonic() + 10)

    assert status_of(conn.received) == 401  # answered by the application, no credentials


# --- open streams per user, across web processes ----------------------------------------------------


def open_stream(port: int, path: str, token: str) -> tuple[int, socket.socket]:
    """GET an event stream; its status and its socket, held open (a 200 once the stream
    has sent its first bytes)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received or (received.startswith(b"HTTP/1.1 200") and b": open" not in received):
        chunk = sock.recv(65536)
        assert chunk, f"the stream closed: {received!r}"
        received += chunk
    return int(received.split()[1]), sock


def test_the_cap_on_a_users_streams_holds_across_web_processes_and_a_dead_ones_slots_expire(processes):
    acme = tenant("Acme")
    job = make_job("tests.noop", tenant=acme)
    token = Token.objects.create(user=operating(staff("alice", of=acme))).key
    env = processes.env(STREAMS_MAX_PER_USER="2", STREAMS_KEEPALIVE_SECONDS="0.5")
    web_a, port_a = processes.web(env)
    _, port_b = processes.web(env)
    path = f"/jobs/{job.pk}/events"

    held = [open_stream(port_a, path, token) for _ in range(2)]
    assert [status for status, _ in held] == [200, 200]
    refused, sock = open_stream(port_b, path, token)
    sock.close()
    assert refused == 429

    os.killpg(web_a.pid, signal.SIGKILL)  # its streams never say goodbye
    web_a.wait(10)
    started = time.monotonic()
    wait_until(lambda: _opened(port_b, path, token), 10, "a dead process's slots to expire")
    print(f"slots free {time.monotonic() - started:.1f} s after their process died")
    for _, sock in held:
        sock.close()


def _opened(port: int, path: str, token: str) -> bool:
    status, sock = open_stream(port, path, token)
    sock.close()
    return status == 200


def test_a_stream_whose_client_goes_away_frees_its_slot(processes):
    acme = tenant("Acme")
    job = make_job("tests.noop", tenant=acme)
    token = Token.objects.create(user=operating(staff("alice", of=acme))).key
    _, port = processes.web(processes.env(STREAMS_MAX_PER_USER="1"))
    path = f"/jobs/{job.pk}/events"
    status, sock = open_stream(port, path, token)
    assert status == 200 and open_stream(port, path, token)[0] == 429

    sock.close()

    # Freed as soon as the server sees the disconnect, long before a lease (45 s) ends.
    wait_until(lambda: _opened(port, path, token), 5, "the slot to be freed")
