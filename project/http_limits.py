"""uvicorn's httptools protocol with bounds on the request head: 414, 431 and 408, not a hang.

uvicorn (0.54) bounds neither headers nor, below 64 kB, the URL: a client could make the
web process buffer a head of any size, and a URL the parser cannot take got a bare 400.
This protocol answers, with a JSON body naming the limit, and closes the connection:

- 414 when the request target passes ``WEB_MAX_URL_BYTES``, as soon as it does;
- 431 when the request line and headers together pass ``WEB_MAX_HEAD_BYTES`` or a
  request has more than ``WEB_MAX_HEADERS`` header fields;
- 408 when a request's head is not complete ``WEB_HEADER_TIMEOUT_SECONDS`` after its
  first byte, and a silent close when a connection sends nothing that long after it
  opened or after its last response (uvicorn's keep-alive timeout covers only the
  idle time between requests, and a client sending a header byte every few seconds
  cancels it each time: 400 such connections were all still open after 77 s). The
  deadline stops once the head is complete: a slow body, a long response and an
  event stream are bounded elsewhere (body limits, graceful shutdown), not here.

httptools hands over a header only once it is complete, so a head that is still
arriving is also measured by the bytes fed to the parser; that count starts with the
first chunk after the request began, so a head is refused at most one socket read
(256 kB) past the limit, and held in memory no longer than that.

Served by ``python -m project.web`` (``--http project.http_limits:LimitedHttpToolsProtocol``).
"""

from __future__ import annotations

import asyncio
import http
import json
from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_MAX_URL_BYTES = 8 * 1024
DEFAULT_MAX_HEAD_BYTES = 32 * 1024
DEFAULT_MAX_HEADERS = 100
DEFAULT_HEADER_TIMEOUT_SECONDS = 15.0


class HeadRefused(Exception):
    """Raised from a parser callback: httptools stops, uvicorn calls send_400_response.
    Also what a head that came too slowly is answered with."""

    def __init__(self, status: int, detail: str, limit: float) -> None:
        super().__init__(detail)
        self.status, self.detail, self.limit = status, detail, limit


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_url = int(getattr(settings, "WEB_MAX_URL_BYTES", DEFAULT_MAX_URL_BYTES))
        self.max_head = int(getattr(settings, "WEB_MAX_HEAD_BYTES", DEFAULT_MAX_HEAD_BYTES))
        self.max_headers = int(getattr(settings, "WEB_MAX_HEADERS", DEFAULT_MAX_HEADERS))
        self.head_timeout = float(
            getattr(settings, "WEB_HEADER_TIMEOUT_SECONDS", DEFAULT_HEADER_TIMEOUT_SECONDS)
        )
        self.head_deadline: asyncio.TimerHandle | None = None
        self.refusal: HeadRefused | None = None
        self.in_head = False
        self.messages_begun = 0
        self.head_bytes = 0  # request line and complete headers, as parsed
        self.fed_in_head = 0  # bytes fed while the head is incomplete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm_head_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refusal is not None:
            return
        begun = self.messages_begun
        super().data_received(data)
        if not self.in_head or self.transport.is_closing():
            return
        # A chunk in which a request began also holds the end of the one before it.
        self.fed_in_head = self.fed_in_head + len(data) if begun == self.messages_begun else 0
        if self.fed_in_head > self.max_head:
            self.refusal = too_many_header_bytes(self.max_head)
            self.send_refusal()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head, self.messages_begun = True, self.messages_begun + 1
        self.head_bytes = self.fed_in_head = 0
        if self.cycle is None or self.cycle.response_complete:
            # A pipelined head that begins while a request runs waits unread (uvicorn
            # pauses reading): its time starts when the response completes.
            self.arm_head_deadline()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self.head_bytes += len(url)
        if len(self.url) > self.max_url:
            self.refuse(
                HeadRefused(414, f"The URL is over the limit of {self.max_url:,} bytes.", self.max_url)
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self.head_bytes > self.max_head:
            self.refuse(too_many_header_bytes(self.max_head))
        if len(self.headers) >= self.max_headers:
            self.refuse(HeadRefused(431, f"More than {self.max_headers} header fields.", self.max_headers))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.disarm_head_deadline()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Waiting for the next request now, unless a pipelined one, its head complete,
        # has just been started.
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.arm_head_deadline()

    def arm_head_deadline(self) -> None:
        self.disarm_head_deadline()
        self.head_deadline = self.loop.call_later(self.head_timeout, self.head_timed_out)

    def disarm_head_deadline(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def head_timed_out(self) -> None:
        """The deadline passed before a complete head: a 408 naming it to a client that
        began one, else (nothing sent) the connection is closed without a word."""
        self.head_deadline = None
        if self.transport.is_closing():
            return
        if not self.in_head:
            self.transport.close()
            return
        self.refusal = HeadRefused(
            408,
            f"The request line and headers did not arrive within {self.head_timeout:g} s.",
            self.head_timeout,
        )
        self.send_refusal()

    def refuse(self, refusal: HeadRefused) -> None:
        self.refusal = refusal
        raise refusal

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request the parser gave up on; ours when a limit did it."""
        if self.refusal is None:
            super().send_400_response(msg)
        else:
            self.send_refusal()

    def send_refusal(self) -> None:
        assert self.refusal is not None
        self.transport.write(response_bytes(self.refusal, self.server_state.default_headers))
        self.transport.close()


def too_many_header_bytes(limit: int) -> HeadRefused:
    return HeadRefused(431, f"The request line and headers are over the limit of {limit:,} bytes.", limit)


def response_bytes(refusal: HeadRefused, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    body = json.dumps({"detail": refusal.detail, "limit": refusal.limit}).encode()
    phrase = http.HTTPStatus(refusal.status).phrase
    lines = [
        f"HTTP/1.1 {refusal.status} {phrase}".encode(),
        *(name + b": " + value for name, value in default_headers),
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
