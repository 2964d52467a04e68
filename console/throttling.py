"""Request rates of the HTTP surfaces: DRF throttles whose rates come from settings, a
count of failed token authentications per client address, and the one definition of
"client address" that the throttles and the admin's login lockout (django-axes) share.

Rates are ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` (``anon``, ``user``, ``dashboard``,
``failed_auth``), read on every request rather than at import, so that a test or a
settings change sees its own. Counts live in Django's default cache, which every web
process shares (project/settings.py says which cache that is).
"""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import cache
from django.http import HttpRequest
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import (
    AnonRateThrottle,
    BaseThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)

FAILED_AUTH_SCOPE = "failed_auth"
DASHBOARD_SCOPE = "dashboard"


def client_address(request: HttpRequest | Request) -> str | None:
    """The caller's address: ``REMOTE_ADDR``, or, behind ``NUM_PROXIES`` trusted proxies,
    the address the outermost of them saw (from the right of X-Forwarded-For). A header
    the client wrote itself is never believed beyond that count, or every request could
    claim a new address and start a fresh count."""
    # DRF's get_ident reads only ``META``, which a Django request has too; its stubs want DRF's.
    return BaseThrottle().get_ident(request) or None  # type: ignore[arg-type]


def throttle_rates() -> dict[str, str]:
    """The current ``DEFAULT_THROTTLE_RATES``: each a rate such as ``"10/min"``
    (``project/settings.py`` sets every one)."""
    # DRF's stubs type the rates as numbers; DRF parses strings.
    return api_settings.DEFAULT_THROTTLE_RATES  # type: ignore[return-value]


class RatesFromSettings(SimpleRateThrottle):
    """DRF reads ``DEFAULT_THROTTLE_RATES`` once, when its throttle module is imported;
    this reads the current settings on every request instead (DRF makes a throttle per
    request)."""

    def __init__(self) -> None:
        self.THROTTLE_RATES = dict(throttle_rates())
        super().__init__()


class AnonThrottle(RatesFromSettings, AnonRateThrottle):
    """Anonymous requests per client address (``anon`` rate)."""


class UserThrottle(RatesFromSettings, UserRateThrottle):
    """Authenticated requests per user (``user`` rate); anonymous ones per address."""


class ScopedThrottle(RatesFromSettings, ScopedRateThrottle):
    """Requests per user to views naming a ``throttle_scope`` (``dashboard``: the
    endpoints that aggregate a window of the job history on every call)."""


def parse_rate(rate: str) -> tuple[int, int]:
    """``"10/min"`` as (10, 60): DRF's format, where the period's first letter counts."""
    count, period = rate.split("/")
    return int(count), {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[0]]


class FailedAuthentications:
    """Failed authentications of one client address in the current fixed window.

    A counter per window (``cache.incr``: atomic on Redis) rather than DRF's list of
    timestamps, which is read, changed and written back: a guesser firing in parallel
    would win exactly those lost writes.
    """

    def __init__(self, request: HttpRequest | Request, now: float | None = None) -> None:
        self.limit, self.window = parse_rate(throttle_rates()[FAILED_AUTH_SCOPE])
        self.now = time.time() if now is None else now
        bucket = int(self.now // self.window)
        self.key = f"throttle_{FAILED_AUTH_SCOPE}_{client_address(request) or 'unknown'}_{bucket}"
        self.window_ends = (bucket + 1) * self.window

    def retry_after(self) -> float | None:
        """Seconds until this address may try again; None while it is under the rate."""
        if (cache.get(self.key) or 0) < self.limit:
            return None
        return self.window_ends - self.now

    def record(self) -> None:
        if not cache.add(self.key, 1, self.window + 1):
            try:
                cache.incr(self.key)
            except ValueError:  # expired between add and incr
                cache.add(self.key, 1, self.window + 1)


def wrong_token(request: HttpRequest | Request) -> None:
    """Counts a wrong token offered from the request's address, and raises DRF's
    ``Throttled`` (429 with Retry-After) once the address is over its ``failed_auth``
    rate. Every door that takes a token calls it for a wrong one (the API, the event
    streams, the body limiter, the export workers' internal API): one count per address.

    Only wrong tokens are refused. A right token is accepted whatever its address's count,
    so a shared address (a NAT, a proxy without TRUSTED_PROXIES) where one client
    misbehaves does not lock the others out. That leaves a guesser, over the rate, free to
    keep asking; what stops guessing is the tokens' entropy, not this rate: an API token
    is 40 hexadecimal characters from os.urandom (160 bits), so a million guesses a
    second against a million tokens would hit one about once in 10^28 years; the export
    workers' token must be as random (docs/security.md; ``check --deploy`` warns below
    32 characters). The count still answers a flood of wrong tokens with 429 and
    Retry-After, which tells a misconfigured client to back off.
    """
    failures = FailedAuthentications(request)
    wait = failures.retry_after()
    if wait is not None:
        raise Throttled(wait, detail="Too many failed authentications from your address.")
    failures.record()


class CountedTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, counting wrong tokens per client address.

    DRF authenticates before any throttle runs, so a request with a wrong token never
    reaches one: this counts such failures per client address and, once over the
    ``failed_auth`` rate, answers 429 with Retry-After to the wrong tokens from that
    address until the window ends; a right token is accepted (``wrong_token`` says why
    that is safe).
    """

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        offered = get_authorization_header(request).split()
        if not offered or offered[0].lower() != self.keyword.lower().encode():
            return None
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            wrong_token(request)
            raise


def dashboard_wait(request: HttpRequest) -> float | None:
    """For the dashboard pages outside DRF (the admin's): None when ``request`` may load
    one now, else the seconds to wait. The count is the API dashboard's, per user."""

    class View:
        throttle_scope = DASHBOARD_SCOPE

    throttle = ScopedThrottle()
    if throttle.allow_request(request, View()):  # type: ignore[arg-type]
        return None
    return throttle.wait() or 1.0
