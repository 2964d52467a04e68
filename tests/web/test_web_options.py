"""The options ``python -m project.web`` gives uvicorn."""

from __future__ import annotations

import uvicorn

from project.web import OPTIONS


def parsed(*extra: str) -> dict:
    return uvicorn.main.make_context("project.web", [*OPTIONS, *extra]).params


def test_forwarding_headers_are_left_to_django_not_believed_by_uvicorn():
    # Django decides from TRUSTED_PROXIES and PROXY_SETS_X_FORWARDED_PROTO; uvicorn would
    # believe X-Forwarded-For and -Proto from any connection on localhost.
    assert parsed()["proxy_headers"] is False


def test_the_bounded_protocol_serves_http_and_an_option_given_later_wins():
    assert parsed()["http"] == "project.http_limits:LimitedHttpToolsProtocol"
    assert parsed("--timeout-graceful-shutdown", "30")["timeout_graceful_shutdown"] == 30
