"""Testing an app built on the engine: a clock that moves only when told, jobs run in
the test's own process, and a bounded wait for what other processes do.

Use them from a test suite (``pytest_plugins = ["jobs.testing"]`` adds the ``clock``
fixture); nothing here runs in production. A test never sleeps for a backoff or a lease:
it moves the clock, then runs what became due::

    def test_a_failed_job_is_retried_after_its_backoff(clock):
        job = jobs.enqueue("reports.rebuild", {"report": 7})
        run_until_idle()              # the first attempt fails
        clock.advance(60)             # the backoff is over
        run_until_idle()              # the retry runs now
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TypeVar

import pytest

from jobs.clock import ManualClock, use_clock
from jobs.worker import run_until_idle

__all__ = ["T0", "ManualClock", "clock", "frozen_clock", "run_until_idle", "use_clock", "wait_until"]

T = TypeVar("T")

#: Where the ``clock`` fixture starts: a fixed instant, so that tests read the same way
#: whatever the day they run.
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def frozen_clock(at: datetime = T0) -> ManualClock:
    """A clock standing still at ``at``; install it with ``use_clock``."""
    return ManualClock(at)


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    """The engine's clock, standing still at ``T0`` until the test moves it."""
    with use_clock(frozen_clock()) as manual:
        yield manual  # type: ignore[misc]


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, what: str = "the condition", interval: float = 0.05
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; fail the
    test (``AssertionError``) after ``timeout`` seconds. For what another process or
    thread does: a real worker, a server restarting. Never for time the engine's clock
    measures: move the clock instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
