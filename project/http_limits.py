"""uvicorn's httptools protocol with bounds on the request head: 414 and 431, not a hang.

uvicorn (0.54) bounds neither headers nor, below 64 kB, the URL: a client could make the
web process buffer a head of any size, and a URL the parser cannot take got a bare 400.
This protocol answers, with a JSON body naming the limit, and closes the connection:

- 414 when the request target passes ``WEB_MAX_URL_BYTES``, as soon as it does;
- 431 when the request line and headers together pass ``WEB_MAX_HEAD_BYTES`` or a
  request has more than ``WEB_MAX_HEADERS`` header fields.

httptools hands over a header only once it is complete, so a head that is still
arriving is also measured by the bytes fed to the parser; that count starts with the
first chunk after the request began, so a head is refused at most one socket read
(256 kB) past the limit, and held in memory no longer than that.

Served by ``python -m project.web`` (``--http project.http_limits:LimitedHttpToolsProtocol``).
"""

from __future__ import annotations

import http
import json
from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_MAX_URL_BYTES = 8 * 1024
DEFAULT_MAX_HEAD_BYTES = 32 * 1024
DEFAULT_MAX_HEADERS = 100


class HeadTooLarge(Exception):
    """Raised from a parser callback: httptools stops, uvicorn calls send_400_response."""

    def __init__(self, status: int, detail: str, limit: int) -> None:
        super().__init__(detail)
        self.status, self.detail, self.limit = status, detail, limit


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_url = int(getattr(settings, "WEB_MAX_URL_BYTES", DEFAULT_MAX_URL_BYTES))
        self.max_head = int(getattr(settings, "WEB_MAX_HEAD_BYTES", DEFAULT_MAX_HEAD_BYTES))
        self.max_headers = int(getattr(settings, "WEB_MAX_HEADERS", DEFAULT_MAX_HEADERS))
        self.refusal: HeadTooLarge | None = None
        self.in_head = False
        self.messages_begun = 0
        self.head_bytes = 0  # request line and complete headers, as parsed
        self.fed_in_head = 0  # bytes fed while the head is incomplete

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

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self.head_bytes += len(url)
        if len(self.url) > self.max_url:
            self.refuse(HeadTooLarge(414, f"The URL is over the limit of {self.max_url:,} bytes.",
                                     self.max_url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self.head_bytes > self.max_head:
            self.refuse(too_many_header_bytes(self.max_head))
        if len(self.headers) >= self.max_headers:
            self.refuse(HeadTooLarge(431, f"More than {self.max_headers} header fields.",
                                     self.max_headers))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        super().on_headers_complete()

    def refuse(self, refusal: HeadTooLarge) -> None:
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


def too_many_header_bytes(limit: int) -> HeadTooLarge:
    return HeadTooLarge(431, f"The request line and headers are over the limit of {limit:,} bytes.",
                        limit)


def response_bytes(refusal: HeadTooLarge, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    body = json.dumps({"detail": refusal.detail, "limit": refusal.limit}).encode()
    phrase = http.HTTPStatus(refusal.status).phrase
    lines = [f"HTTP/1.1 {refusal.status} {phrase}".encode(),
             *(name + b": " + value for name, value in default_headers),
             b"content-type: application/json",
             b"content-length: " + str(len(body)).encode(),
             b"connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
