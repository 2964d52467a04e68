"""API rates: anonymous callers, users, the dashboards, and wrong tokens per address."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import path
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIClient
from rest_framework.views import APIView

from jobs.testing import T0
from project.bodylimit import BodyLimit, BodyLimits
from project.settings import env_rate
from tests.support.base import staff, tenant

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def window_start():
    """Each test starts at the beginning of a minute (time still runs): the failed-token
    counts are per fixed window, and a loop that crossed a window's end would find its
    count reset."""
    with time_machine.travel(T0, tick=True):
        yield


def from_address(address: str, token: str | None = None, **headers: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address, **headers)
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def random_token() -> str:
    return secrets.token_hex(20)


class OpenToAnyone(APIView):
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


urlpatterns = [path("open/", OpenToAnyone.as_view())]


@pytest.mark.urls(__name__)
def test_anonymous_callers_of_an_open_endpoint_over_the_rate_get_429(rates, address):
    # Every Conveyor endpoint needs a login, which DRF checks before any rate: the
    # anonymous rate guards an endpoint that lets anonymous callers in, like this one.
    rates(anon="3/min")
    client = from_address(address)

    codes = [client.get("/open/").status_code for _ in range(5)]

    assert codes == [200, 200, 200, 429, 429]
    assert 0 < int(client.get("/open/")["Retry-After"]) <= 60


def test_a_user_over_the_rate_gets_429_and_another_user_does_not(rates, address):
    rates(user="2/min")
    acme = tenant()
    alice, bob = APIClient(REMOTE_ADDR=address), APIClient(REMOTE_ADDR=address)
    alice.force_login(staff("alice", of=acme))
    bob.force_login(staff("bob", of=acme))

    assert [alice.get("/api/jobs/").status_code for _ in range(3)] == [200, 200, 429]
    assert bob.get("/api/jobs/").status_code == 200


def test_the_dashboard_has_its_own_tighter_rate(rates, address):
    rates(user="100/min", dashboard="2/min")
    client = APIClient(REMOTE_ADDR=address)
    client.force_login(staff("alice", of=tenant()))

    codes = [client.get("/api/jobs/dashboard/").status_code for _ in range(3)]

    assert codes == [200, 200, 429]
    assert client.get("/api/jobs/dashboard/")["Retry-After"]
    assert client.get("/api/jobs/").status_code == 200  # the rest of the API is unaffected


def test_the_admin_dashboard_page_counts_with_the_api_dashboard(rates, address):
    rates(dashboard="2/min")
    user = User.objects.create_superuser("root", password="pw-root")
    api, page = APIClient(REMOTE_ADDR=address), Client(REMOTE_ADDR=address)
    api.force_login(user)
    page.force_login(user)

    assert api.get("/api/jobs/dashboard/").status_code == 200
    assert page.get("/admin/jobs/job/dashboard/").status_code == 200
    refused = page.get("/admin/jobs/job/dashboard/")

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert 'id="dashboard-throttled"' in refused.content.decode()


def test_random_tokens_get_401_then_429_from_that_address(rates, address):
    rates(failed_auth="5/min")

    codes = [from_address(address, random_token()).get("/api/jobs/").status_code for _ in range(200)]

    assert codes[:5] == [401] * 5
    assert set(codes[5:]) == {429}
    refused = from_address(address, random_token()).get("/api/jobs/")
    assert "failed authentications" in refused.json()["detail"]
    assert 0 < int(refused["Retry-After"]) <= 60


def test_over_the_rate_wrong_tokens_get_429_and_a_right_one_from_the_same_address_passes(rates, address):
    # A shared address (a NAT) where one client sends wrong tokens must not lock the
    # others out: only wrong tokens are refused (console.throttling.wrong_token says why
    # that opens no door to guessing).
    rates(failed_auth="3/min")
    token = Token.objects.create(user=staff("alice", of=tenant())).key
    for _ in range(3):
        from_address(address, random_token()).get("/api/jobs/")

    assert from_address(address, random_token()).get("/api/jobs/").status_code == 429
    assert [from_address(address, token).get("/api/jobs/").status_code for _ in range(3)] == [200, 200, 200]
    assert from_address(address, random_token()).get("/api/jobs/").status_code == 429


def test_the_address_may_try_again_when_the_window_is_over(rates, address):
    rates(failed_auth="2/min")
    with time_machine.travel(T0, tick=False) as clock:
        for _ in range(2):
            from_address(address, random_token()).get("/api/jobs/")
        refused = from_address(address, random_token()).get("/api/jobs/")
        assert refused.status_code == 429
        clock.shift(int(refused["Retry-After"]))

        assert from_address(address, random_token()).get("/api/jobs/").status_code == 401


def test_a_right_token_is_not_counted_as_a_failure(rates, address):
    rates(failed_auth="2/min")
    token = Token.objects.create(user=staff("alice", of=tenant())).key

    codes = [from_address(address, token).get("/api/jobs/").status_code for _ in range(5)]

    assert codes == [200] * 5


def test_a_forged_x_forwarded_for_does_not_start_a_fresh_count(rates, address):
    rates(failed_auth="3/min")

    codes = [
        from_address(address, random_token(), HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
        .get("/api/jobs/")
        .status_code
        for n in range(5)
    ]

    assert codes == [401, 401, 401, 429, 429]


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_count(rates, settings, address):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    rates(failed_auth="2/min")

    def through_proxy(client: str) -> int:
        # The proxy appends the address it saw to whatever the client sent.
        forwarded = f"203.0.113.99, {client}"
        return (
            from_address(address, random_token(), HTTP_X_FORWARDED_FOR=forwarded)
            .get("/api/jobs/")
            .status_code
        )

    assert [through_proxy("198.51.100.1") for _ in range(3)] == [401, 401, 429]
    assert through_proxy("198.51.100.2") == 401


@pytest.mark.django_db(transaction=True)  # the stream's thread closes its connection
def test_the_event_streams_count_wrong_tokens_too(rates, address):
    rates(failed_auth="2/min")

    codes = [
        Client(REMOTE_ADDR=address, HTTP_AUTHORIZATION=f"Token {random_token()}")
        .get("/jobs/1/events")
        .status_code
        for _ in range(4)
    ]

    assert codes == [401, 401, 429, 429]


@pytest.mark.parametrize("value", ["60", "60/fortnight", "many/min", "-1/min"])
def test_a_rate_setting_that_is_not_a_rate_is_refused(monkeypatch, value):
    monkeypatch.setenv("THROTTLE_USER_RATE", value)

    with pytest.raises(ImproperlyConfigured, match="THROTTLE_USER_RATE"):
        env_rate("THROTTLE_USER_RATE", "60/min")


def post_large_body(
    address: str, authorization: str, path: str = "/sync/dispatch"
) -> tuple[int, dict[bytes, bytes]]:
    """A 50 MB body declared to the body limiter; (status, headers) of its answer, or
    200 when it let the request through to the application."""
    limits = BodyLimits.of(default=1_000, anonymous=500, declared=lambda path: 10**8)
    sent: list[dict[str, Any]] = []

    async def django(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "client": (address, 40000),
        "headers": [(b"content-length", b"50000000"), (b"authorization", authorization.encode())],
    }
    async_to_sync(BodyLimit(django, limits))(scope, None, send)
    return sent[0]["status"], dict(sent[0]["headers"])


@pytest.mark.django_db(transaction=True)  # the credential lookup runs on a thread of its own
def test_wrong_tokens_with_a_large_body_count_as_in_the_api_then_get_429(rates, address):
    rates(failed_auth="3/min")

    answers = [post_large_body(address, f"Token {random_token()}") for _ in range(5)]

    assert [status for status, _ in answers] == [401, 401, 401, 429, 429]
    assert int(answers[-1][1][b"retry-after"]) > 0
    # One count for both doors: the API refuses this address now too.
    assert from_address(address, random_token()).get("/api/jobs/").status_code == 429


@pytest.mark.django_db(transaction=True)
def test_the_body_limiter_takes_the_worker_token_and_counts_wrong_ones(rates, settings, address):
    settings.JOBS_REMOTE_WORKERS = EXPORT_WORKERS
    rates(failed_auth="2/min")
    report = "/internal/jobs/1/complete"

    assert post_large_body(address, f"Bearer {WORKER_TOKEN}", report)[0] == 200
    assert [post_large_body(address, f"Bearer {random_token()}", report)[0] for _ in range(4)] == [
        401,
        401,
        429,
        429,
    ]
    assert post_large_body(address, f"Bearer {WORKER_TOKEN}", report)[0] == 200
    # The worker's token is no credential anywhere else.
    assert post_large_body("192.0.2.8", f"Bearer {WORKER_TOKEN}")[0] == 401


# --- the export workers' token ------------------------------------------------------------------

WORKER_TOKEN = secrets.token_urlsafe(32)
# The export workers' credential, as the settings derive it from EXPORTS_WORKER_TOKEN.
EXPORT_WORKERS = {"exports": {"token": WORKER_TOKEN, "queues": ["exports"]}}


def worker_claims(address: str, token: str) -> int:
    client = APIClient(REMOTE_ADDR=address, HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post("/internal/jobs/claim", {"worker": "w", "limit": 1}, format="json").status_code


def test_wrong_worker_tokens_get_403_then_429_and_the_right_one_still_passes(rates, settings, address):
    settings.JOBS_REMOTE_WORKERS = EXPORT_WORKERS
    rates(failed_auth="3/min")

    assert [worker_claims(address, random_token()) for _ in range(5)] == [403, 403, 403, 429, 429]
    assert worker_claims(address, WORKER_TOKEN) == 200
    # One count per address for every door: the API refuses its wrong tokens too now.
    assert from_address(address, random_token()).get("/api/jobs/").status_code == 429


def test_wrong_api_tokens_do_not_lock_out_the_worker_token(rates, settings, address):
    settings.JOBS_REMOTE_WORKERS = EXPORT_WORKERS
    rates(failed_auth="2/min")
    for _ in range(3):
        from_address(address, random_token()).get("/api/jobs/")

    assert worker_claims(address, WORKER_TOKEN) == 200
    assert worker_claims(address, "guess") == 429


def test_a_worker_token_that_serves_no_exports_queue_is_a_warning(settings):
    from exports.checks import check_worker_credential

    settings.EXPORTS_WORKER_TOKEN = WORKER_TOKEN
    settings.JOBS_REMOTE_WORKERS = {"render": {"token": WORKER_TOKEN, "queues": ["render"]}}
    assert [w.id for w in check_worker_credential()] == ["exports.W002"]
    settings.JOBS_REMOTE_WORKERS = EXPORT_WORKERS
    assert check_worker_credential() == []
    settings.EXPORTS_WORKER_TOKEN = ""  # no export workers: nothing to say
    settings.JOBS_REMOTE_WORKERS = {}
    assert check_worker_credential() == []
