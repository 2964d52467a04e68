from __future__ import annotations

import secrets

import pytest


@pytest.fixture
def address() -> str:
    """A client address of this test alone: throttle counts outlive a test's transaction
    (they are in the cache), so no two tests may count under one address."""
    return "10.{}.{}.{}".format(*secrets.token_bytes(3))


@pytest.fixture
def rates(settings):
    """Sets throttle rates for the test: ``rates(failed_auth="3/min")``."""

    def set_rates(**scopes: str) -> None:
        current = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {**current, **scopes}}

    return set_rates
