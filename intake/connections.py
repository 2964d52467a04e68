"""Connections that go only where the allow-list permits, and end at a deadline.

httpx resolves host names inside its connection pool, so a check made before the
request would leave a window in which the name's DNS answer changes (DNS rebinding).
The check happens at connect instead: ``GuardedBackend``, httpcore's network backend
extension point, resolves the name itself, refuses unless every address is permitted,
and connects to an address it checked. TLS still verifies the certificate against the
URL's host name: httpcore hands the name, not the address, to the handshake.

Every socket operation's timeout is clamped to the time left before one deadline, so a
server that trickles a byte at a time is cut off when the deadline passes rather than
one timeout per read later. httpx's own transport takes no network backend;
``GuardedTransport`` is the small adapter between httpx's client and an httpcore pool
that does.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from ipaddress import ip_address
from typing import Any

import httpcore
import httpx

from intake.addresses import AllowList, IPAddress


class Refused(Exception):
    """The host resolved to an address the allow-list does not permit; nothing was sent.
    The message names the addresses: it is for the operators' logs, not for tenants."""

    def __init__(self, host: str, addresses: list[IPAddress]) -> None:
        super().__init__(f"{host} resolves to {', '.join(map(str, addresses)) or 'nothing'}")
        self.host = host
        self.addresses = addresses


class Unresolved(Exception):
    """The host name could not be resolved, or not before the deadline."""


class Deadline:
    """A point in time (monotonic) by which the whole exchange must be over."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        return self._end - time.monotonic()

    def clamp(self, timeout: float | None, expired: type[Exception]) -> float:
        """``timeout`` cut to the time left; ``expired`` is raised once none is left (a
        zero timeout would make the socket non-blocking instead)."""
        left = self.left()
        if left <= 0:
            raise expired(f"the deadline of {self.seconds:g} s passed")
        return left if timeout is None else min(timeout, left)


def resolve(host: str, port: int, timeout: float) -> list[IPAddress]:
    """The addresses ``host`` resolves to, in the resolver's order of preference.

    ``getaddrinfo`` has no timeout of its own and a tenant's DNS server can be slow on
    purpose, so the lookup runs in a thread that is left behind when it takes longer
    than ``timeout`` (the system resolver's own retry limit ends it later).
    """
    outcome: Future[list[IPAddress]] = Future()

    def lookup() -> None:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            outcome.set_exception(exc)
            return
        outcome.set_result(list(dict.fromkeys(ip_address(info[4][0]) for info in found)))

    threading.Thread(target=lookup, name="intake-resolve", daemon=True).start()
    try:
        return outcome.result(timeout)
    except TimeoutError as exc:
        raise Unresolved(f"{host} was not resolved within {timeout:g} s") from exc
    except (OSError, UnicodeError) as exc:
        raise Unresolved(f"{host} could not be resolved: {exc}") from exc


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and handshake ends by the deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._deadline.clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._deadline.clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        secured = self._stream.start_tls(
            ssl_context, server_hostname, self._deadline.clamp(timeout, httpcore.ConnectTimeout)
        )
        return DeadlineStream(secured, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class GuardedBackend(httpcore.NetworkBackend):
    """Resolves, checks every address against the allow-list, connects to a checked one."""

    def __init__(self, allow: AllowList, deadline: Deadline) -> None:
        self.allow = allow
        self.deadline = deadline
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = resolve(host, port, self.deadline.clamp(timeout, httpcore.ConnectTimeout))
        if not self.allow.permits_all(host, addresses):
            raise Refused(host, addresses)
        failure: Exception | None = None
        for address in addresses:  # the next one when one does not accept: IPv6 may be down
            try:
                stream = self._sockets.connect_tcp(
                    str(address),
                    port,
                    self.deadline.clamp(timeout, httpcore.ConnectTimeout),
                    local_address,
                    socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return DeadlineStream(stream, self.deadline)
        assert failure is not None  # permits_all refuses an empty list
        raise failure

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# httpcore's errors as httpx's, the most specific first (as httpx's own transport does).
HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def httpx_errors() -> Iterator[None]:
    """httpcore's exceptions raised in the block come out as httpx's, as they would from
    httpx's own transport, so that callers handle one family."""
    try:
        yield
    except tuple(core for core, _ in HTTPX_ERRORS) as exc:
        mapped = next(ours for core, ours in HTTPX_ERRORS if isinstance(exc, core))
        raise mapped(str(exc)) from exc


class ResponseBody(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class GuardedTransport(httpx.BaseTransport):
    """httpx's transport over an httpcore pool that connects through ``GuardedBackend``."""

    def __init__(self, backend: GuardedBackend, tls: ssl.SSLContext) -> None:
        self._pool = httpcore.ConnectionPool(ssl_context=tls, network_backend=backend)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        url = request.url
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with httpx_errors():
            response = self._pool.handle_request(core_request)
        assert isinstance(response.stream, Iterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=ResponseBody(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()
