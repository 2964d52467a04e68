from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.support.base import as_user, granted, staff, tenant


@pytest.fixture
def acme():
    return tenant("Acme")


@pytest.fixture
def globex():
    return tenant("Globex")


@pytest.fixture
def alice(acme) -> APIClient:
    """Acme staff who enqueue and operate jobs."""
    return as_user(granted(staff("alice", of=acme), "jobs.add_job", "jobs.operate_job"))


@pytest.fixture
def bob(acme) -> APIClient:
    """An Acme member who is not staff: reads, never writes."""
    return as_user(staff("bob", of=acme, is_staff=False))


@pytest.fixture
def olga() -> APIClient:
    """A platform operator: every tenant."""
    return as_user(granted(staff("olga", operator=True), "jobs.add_job", "jobs.operate_job"))
