"""The tenants the market tests act for. The fake market-data API listens on 127.0.0.1,
which the outbound rules refuse unless the allow-list names it."""

from __future__ import annotations

import pytest

from tests.support.base import tenant


@pytest.fixture
def acme():
    return tenant("Acme")


@pytest.fixture
def globex():
    return tenant("Globex")


@pytest.fixture(autouse=True)
def fake_api_allowed(settings):
    settings.INTAKE_HTTP_ALLOW = ["127.0.0.1"]
