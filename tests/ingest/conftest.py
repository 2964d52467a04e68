"""The tenants the ingest tests act for."""

from __future__ import annotations

import pytest

from tests.support.base import tenant


@pytest.fixture
def acme():
    return tenant("Acme")


@pytest.fixture
def globex():
    return tenant("Globex")
