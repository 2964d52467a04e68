"""The body-limit middleware called directly as an ASGI application: what it lets through,
what it refuses before a byte is read, and where it cuts a chunked body off."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.views import View
from rest_framework.authtoken.models import Token

from factors import conf
from intake.uploads import MULTIPART_SLACK, body_limit, declared_body_limit
from project.bodylimit import BodyLimit, BodyLimits, valid_credential
from tests.support.base import staff

# The limits the views of these paths declare, in place of the URL conf's.
LIMITS = BodyLimits.of(
    default=1_000, anonymous=500, declared={"/sync/units": 2_000, "/sync/dispatch": 5_000}.get
)


class Application:
    """Stands for Django behind the middleware: reads the whole body, then answers 200;
    on a disconnect while reading it answers nothing, as Django's handler does."""

    def __init__(self) -> None:
        self.called = False
        self.body = b""
        self.disconnected = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.called = True
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return
            self.body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def anonymous(scope: dict[str, Any]) -> bool:
    return False


async def signed_in(scope: dict[str, Any]) -> bool:
    return True


async def not_looked_up(scope: dict[str, Any]) -> bool:
    raise AssertionError("the credential was looked up")


class Exchange:
    """One request through the middleware: the client's body chunks in, the answer out."""

    def __init__(
        self,
        path: str,
        headers: dict[str, str],
        chunks: list[bytes],
        *,
        has_credential: Any = signed_in,
        scope_type: str = "http",
    ) -> None:
        self.app = Application()
        self.reads = 0
        self.sent: list[dict[str, Any]] = []
        pending = [
            {"type": "http.request", "body": chunk, "more_body": n < len(chunks) - 1}
            for n, chunk in enumerate(chunks)
        ]

        async def receive() -> dict[str, Any]:
            self.reads += 1
            return pending.pop(0) if pending else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            self.sent.append(message)

        scope = {
            "type": scope_type,
            "method": "POST",
            "path": path,
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
        async_to_sync(BodyLimit(self.app, LIMITS, has_credential))(scope, receive, send)

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    def json(self) -> dict[str, Any]:
        return json.loads(self.sent[1]["body"])


def declared(size: int) -> dict[str, str]:
    return {"Content-Length": str(size)}


CHUNKED = {"Transfer-Encoding": "chunked"}


def test_a_declared_body_over_the_path_limit_is_refused_with_413_before_a_byte_is_read():
    exchange = Exchange("/sync/dispatch", declared(5_001), [b"x" * 5_001])

    assert exchange.status == 413 and exchange.reads == 0 and not exchange.app.called
    assert exchange.json() == {
        "detail": "The request body is 5 kB (5,001 bytes); the limit here is 5 kB (5,000 bytes).",
        "limit": 5_000,
    }
    assert exchange.headers[b"connection"] == b"close"
    assert exchange.headers[b"content-type"] == b"application/json"


def test_the_limit_the_paths_view_declares_sets_the_limit_else_the_default():
    assert [LIMITS.for_path(p) for p in ("/sync/dispatch", "/sync/units", "/api/jobs/")] == [
        5_000,
        2_000,
        1_000,
    ]


def test_a_chunked_body_is_cut_off_with_413_as_soon_as_it_passes_the_limit():
    exchange = Exchange("/sync/units", CHUNKED, [b"x" * 800] * 10)

    assert exchange.status == 413 and exchange.json()["limit"] == 2_000
    assert exchange.reads == 3  # 800, 1,600, 2,400: cut off there
    assert exchange.app.disconnected and len(exchange.sent) == 2  # the application answered nothing


def test_a_body_within_its_limit_passes_through_whole():
    exchange = Exchange("/sync/dispatch", declared(4_500), [b"a" * 3_000, b"b" * 1_500])

    assert exchange.status == 200 and exchange.app.body == b"a" * 3_000 + b"b" * 1_500


def test_a_small_anonymous_body_passes_without_a_credential_lookup():
    exchange = Exchange("/admin/login/", declared(300), [b"u" * 300], has_credential=not_looked_up)

    assert exchange.status == 200 and exchange.app.body == b"u" * 300


def test_an_anonymous_body_over_the_anonymous_limit_is_refused_with_401_before_it_is_read():
    exchange = Exchange("/sync/dispatch", declared(501), [b"x" * 501], has_credential=anonymous)

    assert exchange.status == 401 and exchange.reads == 0 and not exchange.app.called
    assert exchange.headers[b"www-authenticate"] == b"Token"
    assert exchange.json()["limit"] == 500


def test_an_anonymous_chunked_body_is_refused_with_401_before_it_is_read():
    exchange = Exchange("/api/jobs/", CHUNKED, [b"x" * 10], has_credential=anonymous)

    assert exchange.status == 401 and exchange.reads == 0 and not exchange.app.called


def test_a_content_length_that_is_not_a_number_is_refused_with_400():
    exchange = Exchange("/api/jobs/", {"Content-Length": "12abc"}, [b""])

    assert exchange.status == 400 and not exchange.app.called


def test_a_websocket_passes_untouched():
    seen = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    async_to_sync(BodyLimit(app, LIMITS, not_looked_up))(
        {"type": "websocket", "path": "/ws/jobs/"}, None, None
    )
    assert seen == ["websocket"]


# --- the credential lookup (a thread of its own: committed rows) ---------------------------------------


def credential(**headers: str) -> bool:
    scope = {"headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    return async_to_sync(valid_credential)(scope)


@pytest.mark.django_db(transaction=True)
def test_a_valid_token_is_a_credential_and_an_unknown_or_inactive_ones_token_is_not():
    token = Token.objects.create(user=staff("alice")).key
    gone = staff("bob")
    gone_token = Token.objects.create(user=gone).key
    gone.is_active = False
    gone.save()

    assert credential(authorization=f"Token {token}")
    assert not credential(authorization="Token 0123456789abcdef0123456789abcdef01234567")
    assert not credential(authorization=f"Token {gone_token}")
    assert not credential(authorization=f"Bearer {token}")


@pytest.mark.django_db(transaction=True)
def test_a_signed_in_session_is_a_credential_and_a_signed_out_one_is_not():
    client = Client()
    client.force_login(staff("alice"))
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    assert credential(cookie=cookie)

    client.logout()
    assert not credential(cookie=cookie)
    assert not credential(cookie="csrftoken=abc")
    assert not credential()


# --- the settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "paths"),
    [
        ("entries", ["/sync/dispatch", reverse("admin:factors_dataentry_upload")]),
        ("factors", ["/sync/factors/plane", reverse("admin:factors_emissionfactor_upload")]),
        ("units", ["/sync/units", reverse("admin:factors_unit_upload")]),
    ],
)
def test_each_upload_address_allows_its_file_limit_plus_multipart_framing(kind, paths):
    limits = BodyLimits.from_settings()

    assert [limits.for_path(path) for path in paths] == [conf.max_bytes(kind) + MULTIPART_SLACK] * 2


def test_the_scrapers_addresses_allow_their_bodies_limit_plus_framing():
    limits = BodyLimits.from_settings()
    paths = ["/scraping/listings/sync", "/scraping/listings/handoffs"]

    assert [limits.for_path(path) for path in paths] == [
        settings.INGEST_SCRAPE_MAX_BYTES + MULTIPART_SLACK
    ] * 2


def test_the_remote_workers_addresses_take_the_default_limit():
    """An export's completion, the largest body a remote worker sends, fits it."""
    limits = BodyLimits.from_settings()
    paths = ["/internal/jobs/claim", "/internal/jobs/heartbeat", "/internal/jobs/7/complete"]

    assert [limits.for_path(path) for path in paths] == [settings.WEB_MAX_BODY_BYTES] * 3


def test_a_views_declared_limit_is_read_from_the_settings_at_each_request(settings):
    limits = BodyLimits.from_settings()
    settings.FACTORS_ENTRIES_MAX_BYTES = 10

    assert limits.for_path("/sync/dispatch") == 10 + MULTIPART_SLACK
    assert limits.for_path(reverse("admin:factors_dataentry_upload")) == 10 + MULTIPART_SLACK


def test_a_path_beside_a_declaring_view_takes_the_default():
    """A limit belongs to a view, not to a prefix of its address."""
    limits = BodyLimits.from_settings()

    assert limits.for_path("/sync/dispatch/more") == settings.WEB_MAX_BODY_BYTES
    assert limits.for_path("/sync/recalculate-emissions/plane") == settings.WEB_MAX_BODY_BYTES


def test_a_function_view_and_a_class_based_view_declare_a_limit_alike():
    @body_limit(lambda: 100)
    def upload(request):
        raise AssertionError("not called")

    @body_limit(lambda: 200)
    class Upload(View):
        pass

    assert declared_body_limit(upload) == 100 + MULTIPART_SLACK
    assert declared_body_limit(Upload.as_view()) == 200 + MULTIPART_SLACK
    assert declared_body_limit(View.as_view()) is None


def test_anything_else_allows_the_default_and_django_keeps_at_most_that_in_memory():
    limits = BodyLimits.from_settings()

    assert limits.for_path("/api/jobs/") == settings.WEB_MAX_BODY_BYTES
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE <= settings.WEB_MAX_BODY_BYTES
    assert settings.FILE_UPLOAD_MAX_MEMORY_SIZE <= settings.WEB_MAX_BODY_BYTES


class Trickle:
    """A client that sends its body's first chunk and then nothing more, until its
    connection is dropped; ``after`` is what a read past the body gets (the client's
    disconnect, much later)."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.pending = chunks
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self.pending:
            return self.pending.pop(0)
        await asyncio.sleep(5)  # a client that has stopped sending: the deadline ends it
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


def test_a_body_that_stops_arriving_is_answered_408_at_its_deadline():
    limits = BodyLimits.of(default=1_000, anonymous=500, declared=lambda path: None, body_seconds=0.2)
    app, client = Application(), Trickle([{"type": "http.request", "body": b"x" * 10, "more_body": True}])
    scope = {"type": "http", "method": "POST", "path": "/api/jobs/", "headers": [(b"content-length", b"100")]}
    async_to_sync(BodyLimit(app, limits, signed_in))(scope, client.receive, client.send)

    assert client.sent[0]["status"] == 408 and app.disconnected
    assert json.loads(client.sent[1]["body"]) == {
        "detail": "The request body did not arrive within 0.2 s.",
        "limit": 0.2,
    }
    assert dict(client.sent[0]["headers"])[b"connection"] == b"close"


def test_once_the_body_is_in_the_response_is_not_cut_by_the_body_deadline():
    """An event stream waits for its client's disconnect long after its body."""
    limits = BodyLimits.of(default=1_000, anonymous=500, declared=lambda path: None, body_seconds=0.05)
    client = Trickle([{"type": "http.request", "body": b"", "more_body": False}])
    seen: list[dict[str, Any]] = []

    async def stream(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(await receive())
        seen.append(await asyncio.wait_for(receive(), 1.0))  # the client's disconnect, later

    scope = {"type": "http", "method": "GET", "path": "/api/jobs/stream/", "headers": []}
    with pytest.raises(TimeoutError):  # still waiting at 1 s: the 0.05 s deadline did not cut it
        async_to_sync(BodyLimit(stream, limits, signed_in))(scope, client.receive, client.send)
    assert seen == [{"type": "http.request", "body": b"", "more_body": False}]
    assert client.sent == []
