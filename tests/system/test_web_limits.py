"""The web process's trust boundary, over a real uvicorn process and raw sockets: bodies
over their limit (declared or chunked) and bodies of callers without credentials are
refused before they are read, in little memory; oversized URLs and headers get 414 and
431; a malformed multipart a JSON 400; a static path leading outside the static folders
a 404. An upload within its limit still goes through."""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from jobs.models import Job
from project.bodylimit import view_body_limit
from tests.support.base import operating, staff, tenant
from tests.support.factors.builders import csv_bytes, module, plane_factors, plane_rows, report

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

MB = 1024 * 1024
BOUNDARY = "conveyor-web-limits"
RSS_GROWTH_BOUND_MB = 64


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    sent: int = 0  # body bytes the client got out before the answer came

    def json(self) -> dict:
        return json.loads(self.body)


def read_answer(sock: socket.socket, sent: int = 0) -> Answer:
    """The response on ``sock``; the server may reset the connection right after it."""
    data = b""
    try:
        while True:
            head, found, body = data.partition(b"\r\n\r\n")
            if found and len(body) >= int(_headers(head).get("content-length", 1 << 62)):
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head, "the connection closed without an answer"
    headers = _headers(head)
    return Answer(int(head.split()[1]), headers, body[: int(headers.get("content-length", len(body)))], sent)


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}


def multipart_chunks(total: int) -> Iterator[bytes]:
    """A multipart body of exactly ``total`` bytes (a CSV file), made on the fly."""
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n'
        f"Content-Type: text/csv\r\n\r\nquantity,unit,haul,cabin\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    block = b"1.5,km,short,economy\n" * 12_000  # about 250 kB
    yield head
    left = total - len(head) - len(tail)
    while left > 0:
        yield block[:left]
        left -= len(block)
    yield tail


def post_large(
    port: int, path: str, total: int, *, chunked: bool, headers: dict[str, str] | None = None
) -> Answer:
    """POST a ``total``-byte multipart body, stopping as soon as the server answers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}",
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    sent = 0
    try:
        for piece in multipart_chunks(total):
            if select.select([sock], [], [], 0)[0]:
                break  # answered (or closed) before the whole body was sent
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
        else:
            if chunked:
                sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return read_answer(sock, sent)


def send_raw(port: int, data: bytes) -> Answer:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return read_answer(sock)


def memory_kb(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def entries_limit() -> int:
    """What /sync/dispatch declares: the entries CSV's limit and the multipart framing."""
    return view_body_limit("/sync/dispatch")


# --- request bodies ----------------------------------------------------------------------------------


LARGE_BODIES = {
    "anonymous, 200 MB declared, /sync/dispatch": ("/sync/dispatch", False, False, 413),
    "anonymous, 200 MB declared, /api/jobs/": ("/api/jobs/", False, False, 413),
    "anonymous, 200 MB chunked, /sync/dispatch": ("/sync/dispatch", True, False, 401),
    "anonymous, 200 MB chunked, /api/jobs/": ("/api/jobs/", True, False, 401),
    "staff token, 200 MB declared, /sync/dispatch": ("/sync/dispatch", False, True, 413),
    "staff token, 200 MB chunked, /sync/dispatch": ("/sync/dispatch", True, True, 413),
}


@pytest.mark.parametrize("case", list(LARGE_BODIES))
def test_a_200_mb_body_is_refused_with_the_web_process_growing_by_less_than_64_mb(processes, case):
    path, chunked, with_token, status = LARGE_BODIES[case]
    headers = (
        {"Authorization": f"Token {Token.objects.create(user=operating(staff())).key}"} if with_token else {}
    )
    web, port = processes.web()
    post_large(port, path, 2 * MB, chunked=chunked, headers=headers)  # warm-up: code paths loaded
    before = memory_kb(web.pid, "VmRSS")

    started = time.monotonic()
    answer = post_large(port, path, 200 * MB, chunked=chunked, headers=headers)
    seconds = time.monotonic() - started
    growth_mb = (memory_kb(web.pid, "VmHWM") - before) / 1024

    print(
        f"{case}: {answer.status} after {answer.sent / MB:.1f} MB sent in {seconds:.1f} s; "
        f"web RSS {before / 1024:.0f} MB, growth to its peak {growth_mb:.1f} MB"
    )
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    assert "limit" in answer.json() and answer.json()["detail"]
    if chunked and with_token:  # read up to the limit, not beyond
        assert entries_limit() < answer.sent < entries_limit() + 50 * MB
    else:  # refused before the body was read
        assert answer.sent < 50 * MB
    assert growth_mb < RSS_GROWTH_BOUND_MB
    assert not Job.objects.exists()


def test_an_anonymous_body_over_the_anonymous_limit_is_refused_even_within_the_path_limit(processes):
    _, port = processes.web()
    answer = post_large(port, "/sync/dispatch", 30 * MB, chunked=False)

    assert answer.status == 401 and answer.headers["www-authenticate"] == "Token"
    assert answer.json()["limit"] == settings.WEB_MAX_ANONYMOUS_BODY_BYTES
    assert answer.sent < 30 * MB  # more than the sockets' buffers hold: it was not read


def test_an_entries_upload_within_its_limit_goes_through_with_a_token(processes, tmp_path):
    acme = tenant("Acme")
    plane_factors()
    travel = module(report(tenant=acme))
    token = Token.objects.create(user=operating(staff("alice", of=acme))).key
    _, port = processes.web(processes.env(CONVEYOR_VAR_DIR=str(tmp_path)))
    fields = {"report": str(travel.report_id), "module": "travel", "data_entry_type": "plane"}
    body = b"".join(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    )
    body += (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="e.csv"\r\n'
        f"Content-Type: text/csv\r\n\r\n"
    ).encode()
    body += csv_bytes(["quantity", "unit", "haul", "cabin"], plane_rows(5_000))
    body += f"\r\n--{BOUNDARY}--\r\n".encode()
    assert len(body) > settings.WEB_MAX_ANONYMOUS_BODY_BYTES  # the credential was looked up

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "POST",
        "/sync/dispatch",
        body=body,
        headers={
            "Authorization": f"Token {token}",
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        },
    )
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()

    assert response.status == 202, answer
    job = Job.objects.get(pk=answer["job"])
    assert (job.type, answer["rows"]) == ("factors.csv_ingest", 5_000)


def part(headers: str, content: str) -> bytes:
    return f"--x\r\nContent-Disposition: form-data; {headers}\r\n\r\n{content}\r\n--x--\r\n".encode()


MALFORMED = {
    "no boundary": ("", b"--x\r\ngarbage", "Invalid boundary in multipart: None"),
    "part headers over 1 kB": (
        "; boundary=x",
        part(f'name="f"\r\nX-Pad: {"p" * 2000}', "1"),
        "Request max total header size exceeded.",
    ),
    "bad base64": (
        "; boundary=x",
        part('name="f"; filename="e.csv"\r\nContent-Transfer-Encoding: base64', "!!not base64!!"),
        "Could not decode base64 data.",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_multipart_is_answered_with_a_json_400_naming_the_problem(processes, case):
    parameters, body, problem = MALFORMED[case]
    token = Token.objects.create(user=operating(staff())).key
    _, port = processes.web()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "POST",
        "/sync/dispatch",
        body=body,
        headers={"Authorization": f"Token {token}", "Content-Type": "multipart/form-data" + parameters},
    )
    response = conn.getresponse()
    body = response.read()
    conn.close()

    assert response.status == 400 and response.getheader("Content-Type") == "application/json"
    assert json.loads(body) == {"detail": f"Multipart form parse error - {problem}"}


# --- URLs, headers, static files ---------------------------------------------------------------------


def get(path: str, *headers: bytes) -> bytes:
    return (
        b"GET "
        + path.encode()
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"Connection: close\r\n\r\n"
    )


def test_an_oversized_url_is_answered_414_naming_the_limit(processes):
    _, port = processes.web()
    answer = send_raw(port, get("/" + "a" * (settings.WEB_MAX_URL_BYTES + 1)))

    assert answer.status == 414
    assert answer.json() == {"detail": "The URL is over the limit of 8,192 bytes.", "limit": 8192}


def test_a_url_just_within_the_limit_reaches_the_application(processes):
    _, port = processes.web()

    assert send_raw(port, get("/" + "a" * (settings.WEB_MAX_URL_BYTES - 1))).status == 404


def test_oversized_headers_are_answered_431(processes):
    _, port = processes.web()
    headers = [b"X-Filler-%d: %s" % (n, b"f" * 1000) for n in range(40)]
    answer = send_raw(port, get("/admin/login/", *headers))

    assert answer.status == 431
    assert answer.json()["limit"] == settings.WEB_MAX_HEAD_BYTES


def test_too_many_header_fields_are_answered_431(processes):
    _, port = processes.web()
    answer = send_raw(port, get("/admin/login/", *(b"X-Field-%d: 1" % n for n in range(150))))

    assert answer.status == 431
    assert answer.json() == {"detail": "More than 100 header fields.", "limit": 100}


def test_a_header_that_never_ends_is_cut_off_at_the_limit(processes):
    _, port = processes.web()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
    sent = 0
    try:
        while sent < 20 * MB and not select.select([sock], [], [], 0.01)[0]:
            sock.sendall(b"e" * 16_384)
            sent += 16_384
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = read_answer(sock)

    assert answer.status == 431
    assert sent < 20 * MB


def test_a_static_path_leading_outside_the_static_folders_is_a_404(processes):
    _, port = processes.web(processes.env(SERVE_STATIC="1"))

    assert send_raw(port, get("/static/..%2f..%2fetc%2fpasswd")).status == 404
    assert send_raw(port, get("/static/../../../etc/passwd")).status == 404
    assert send_raw(port, get("/static/admin/css/base.css")).status == 200
