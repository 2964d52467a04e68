"""Request bodies are bounded before Django reads them.

Django's ASGI handler reads a whole body (to a temporary file past
``FILE_UPLOAD_MAX_MEMORY_SIZE``) before any middleware or view runs, so a view's own
size check comes after the bytes are in. This ASGI middleware stands in front of it:

- 413 before a byte is read when ``Content-Length`` is over the limit for the path;
- 413 as soon as the bytes received pass that limit (a chunked body declares no length):
  the application is told the client went away, and the connection is closed;
- 408 when the body is not all in ``WEB_BODY_TIMEOUT_SECONDS`` after its head: a client
  sending a byte now and then would otherwise hold a connection and a request task for
  as long as it likes (the head's own deadline ends with the head), the same way;
- 401 before a byte is read when the body may be larger than what a caller without
  credentials may send (``Content-Length`` over ``WEB_MAX_ANONYMOUS_BODY_BYTES``, or
  chunked) and the caller has none that is valid: a DRF token (``Authorization: Token
  …``), the session cookie of an active user, or, under ``/internal/jobs/``, a remote
  worker's bearer token (``JOBS_REMOTE_WORKERS``; export workers are such). Small
  bodies (the admin's login form) pass without a look; credentials are looked up only
  for the others. A wrong token counts against the caller's address as it does in the API
  (``console.throttling.wrong_token``), and past that rate the answer is 429 (to wrong
  tokens only: a right one from the same address passes).

Limits (``BodyLimits.from_settings``): a view that takes large bodies declares its limit
(``intake.uploads.body_limit``), found by resolving the request's path to its view
before Django does; ``WEB_MAX_BODY_BYTES`` is the limit of every other view.
Every answer is JSON, ``{"detail": …, "limit": …}``, with ``Connection: close``: the
rest of a refused body is not read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.db import connection
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.urls import Resolver404, resolve
from rest_framework.exceptions import AuthenticationFailed, Throttled

from console.throttling import CountedTokenAuthentication, wrong_token
from intake.uploads import declared_body_limit
from jobs import remote

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
CredentialCheck = Callable[[Scope], Awaitable[bool]]

# Path prefixes whose callers hold a bearer token of their own rather than a user's:
# the remote workers' internal API.
BEARER_TOKENS: dict[str, Callable[[str], bool]] = {
    "/internal/jobs/": lambda authorization: remote.authenticate(authorization) is not None,
}

KB = 1024
MB = 1024 * KB
DEFAULT_MAX_BODY_BYTES = 1 * MB
DEFAULT_MAX_ANONYMOUS_BODY_BYTES = 64 * KB
DEFAULT_BODY_TIMEOUT_SECONDS = 300.0


def view_body_limit(path: str) -> int | None:
    """The body limit the view serving ``path`` declares; None when it declares none (or
    no view serves it). Resolving costs what Django's own resolving of the request does:
    the URL conf's patterns are compiled once."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    return declared_body_limit(match.func)


@dataclass(frozen=True)
class BodyLimits:
    """How many body bytes a request may send: what the view serving its path declares
    (``declared``: the URL conf's views, unless a test says otherwise), ``default``
    elsewhere, and at most ``anonymous`` without a credential."""

    default: int
    anonymous: int
    declared: Callable[[str], int | None] = view_body_limit
    # Seconds the whole body may take to arrive after its head; None: no deadline.
    body_seconds: float | None = None

    @classmethod
    def from_settings(cls) -> BodyLimits:
        return cls.of(
            getattr(settings, "WEB_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            getattr(settings, "WEB_MAX_ANONYMOUS_BODY_BYTES", DEFAULT_MAX_ANONYMOUS_BODY_BYTES),
            body_seconds=getattr(settings, "WEB_BODY_TIMEOUT_SECONDS", DEFAULT_BODY_TIMEOUT_SECONDS),
        )

    @classmethod
    def of(
        cls,
        default: int,
        anonymous: int,
        *,
        declared: Callable[[str], int | None] = view_body_limit,
        body_seconds: float | None = None,
    ) -> BodyLimits:
        return cls(
            int(default), int(anonymous), declared, None if body_seconds is None else float(body_seconds)
        )

    def for_path(self, path: str) -> int:
        limit = self.declared(path)
        return self.default if limit is None else limit


class BodyLimit:
    """The ASGI middleware (see the module docstring); other scopes pass untouched."""

    def __init__(
        self, app: App, limits: BodyLimits | None = None, has_credential: CredentialCheck | None = None
    ) -> None:
        self.app = app
        self.limits = limits or BodyLimits.from_settings()
        self.has_credential = has_credential or valid_credential

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.for_path(scope["path"])
        try:
            declared = content_length(scope)
        except ValueError:
            await refuse(scope, send, 400, "Content-Length must be a number of bytes.", limit)
            return
        if declared is not None and declared > limit:
            await refuse(
                scope,
                send,
                413,
                f"The request body is {size(declared)}; the limit here is {size(limit)}.",
                limit,
            )
            return
        may_be_large = (declared is None and chunked(scope)) or (declared or 0) > self.limits.anonymous
        try:
            signed_in = not may_be_large or await self.has_credential(scope)
        except Throttled as exc:
            # DRF sets ``wait`` on the exception; its stubs leave the attribute out.
            wait = exc.wait  # type: ignore[attr-defined]
            await refuse(scope, send, 429, str(exc.detail), self.limits.anonymous, retry_after=wait)
            return
        if not signed_in:
            credentials = (
                "the export workers' token (Authorization: Bearer …)"
                if bearer_check(scope)
                else "a token (Authorization: Token …) or a session"
            )
            await refuse(
                scope,
                send,
                401,
                f"Sign in to send a request body over {size(self.limits.anonymous)}: {credentials}.",
                self.limits.anonymous,
            )
            return
        body = BoundedBody(scope, receive, send, limit, self.limits.body_seconds)
        await self.app(scope, body.receive, body.send)


class BoundedBody:
    """``receive`` and ``send`` of one request: counts the body's bytes, and past the
    limit, or past its deadline, answers 413 (408) itself and tells the application the
    client went away (Django's handler then drops the request without answering). Once
    the body is in, ``receive`` waits for the client's disconnect as long as the response
    takes (an event stream): the deadline is the body's only."""

    def __init__(
        self, scope: Scope, receive: Receive, send: Send, limit: int, seconds: float | None = None
    ) -> None:
        self.scope, self._receive, self._send, self.limit = scope, receive, send, limit
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.received = 0
        self.started = self.cut_off = self.body_done = False

    async def receive(self) -> Message:
        if self.cut_off:
            return {"type": "http.disconnect"}
        if self.body_done or self.deadline is None:
            message = await self._receive()
        else:
            try:
                message = await asyncio.wait_for(self._receive(), max(0.0, self.deadline - time.monotonic()))
            except TimeoutError:
                self.cut_off = True
                if not self.started:
                    await refuse(
                        self.scope,
                        self._send,
                        408,
                        f"The request body did not arrive within {self.seconds:g} s.",
                        self.seconds,
                    )
                return {"type": "http.disconnect"}
        if message["type"] == "http.request":
            self.body_done = not message.get("more_body", False)
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.cut_off = True
                if not self.started:
                    await refuse(
                        self.scope,
                        self._send,
                        413,
                        f"The request body passed the limit here, {size(self.limit)}.",
                        self.limit,
                    )
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.cut_off:
            return
        self.started = True
        await self._send(message)


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (``name`` lower-case, as ASGI gives them)."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def content_length(scope: Scope) -> int | None:
    """The declared body length; None when there is none; ValueError when it is not a
    number of bytes."""
    value = header(scope, b"content-length")
    if value is None:
        return None
    if not value.strip().isdigit():
        raise ValueError(value)
    return int(value)


def chunked(scope: Scope) -> bool:
    """Whether the body's length is unknown: HTTP/1.1 sends such a body chunked."""
    return header(scope, b"transfer-encoding") is not None


def size(count: int) -> str:
    """``104923136`` → ``"100.1 MB (104,923,136 bytes)"``."""
    short = f"{count / MB:.1f} MB" if count >= MB else f"{count / KB:.0f} kB"
    return f"{short} ({count:,} bytes)"


async def refuse(
    scope: Scope, send: Send, status: int, detail: str, limit: float, *, retry_after: float | None = None
) -> None:
    """Answer with ``status`` and a JSON body, and close the connection (the rest of the
    request's body is never read)."""
    logger.warning(
        "refused %s %s with %s: %s",
        scope["method"],
        scope["path"],
        status,
        detail,
        extra={"status": status, "path": scope["path"], "limit": limit},
    )
    body = json.dumps({"detail": detail, "limit": limit}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Token"))
    if retry_after is not None:
        headers.append((b"retry-after", str(math.ceil(retry_after)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def valid_credential(scope: Scope) -> bool:
    """Whether the request carries a valid DRF token or an active user's session, looked
    up without its body (with neither header, without a query). Throttled when its
    address has offered too many wrong tokens."""
    authorization, cookie = header(scope, b"authorization"), header(scope, b"cookie")
    if not authorization and not cookie:
        return False
    request = HttpRequest()
    request.META["REMOTE_ADDR"] = (scope.get("client") or ("", 0))[0]
    forwarded = header(scope, b"x-forwarded-for")
    if forwarded:
        request.META["HTTP_X_FORWARDED_FOR"] = forwarded
    if authorization:
        request.META["HTTP_AUTHORIZATION"] = authorization
    request.COOKIES = parse_cookie(cookie or "")
    matches = bearer_check(scope)
    if matches is not None and authorization and authorization.startswith("Bearer "):
        return await sync_to_async(_valid_bearer, thread_sensitive=False)(request, matches)
    return await sync_to_async(_valid_credential, thread_sensitive=False)(request)


def bearer_check(scope: Scope) -> Callable[[str], bool] | None:
    """The check of the bearer token the request's path takes instead of a user's, if any."""
    return next(
        (check for prefix, check in BEARER_TOKENS.items() if scope.get("path", "").startswith(prefix)), None
    )


def _valid_bearer(request: HttpRequest, matches: Callable[[str], bool]) -> bool:
    """Whether the path's own bearer token is the one offered; a wrong one is counted
    (``Throttled`` past the rate). In a thread: the count is in the cache."""
    if matches(request.META["HTTP_AUTHORIZATION"]):
        return True
    wrong_token(request)
    return False


def _valid_credential(request: HttpRequest) -> bool:
    try:
        try:
            if CountedTokenAuthentication().authenticate(request):  # type: ignore[arg-type]
                return True
        except AuthenticationFailed:
            return False  # DRF refuses the whole request for a bad token, whatever else it has
        session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        if not session_key:
            return False
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        return bool(get_user(request).is_authenticated)
    finally:
        connection.close()  # a pool thread: nothing else would ever close it
