from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.support.base import as_user, staff


@pytest.fixture
def olga() -> APIClient:
    """A platform operator: every tenant."""
    return as_user(staff("olga", operator=True))
