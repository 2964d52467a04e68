from __future__ import annotations

import pytest

from jobs.clock import ManualClock, use_clock
from tests.base import T0


@pytest.fixture
def clock():
    with use_clock(ManualClock(T0)) as manual:
        yield manual
