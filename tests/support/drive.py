"""Running a pipeline on the engine's manual clock: every due job, then the clock moved
to the next one, until nothing is left (no test waits for a backoff)."""

from __future__ import annotations

from collections.abc import Callable

import jobs
from jobs.clock import ManualClock
from jobs.models import Job


def drain(clock: ManualClock, *, rounds: int = 10_000, each: Callable[[], None] | None = None) -> int:
    """Run until no job is pending; the number of rounds it took."""
    for done in range(rounds):
        jobs.run_until_idle()
        if each is not None:
            each()
        # A fan-in waiting on other jobs is not due whatever its time says.
        upcoming = Job.objects.filter(state="pending", waits=False).order_by("run_after").first()
        if upcoming is None:
            assert not Job.objects.filter(state="pending").exists(), "a fan-in waits forever"
            return done
        clock.advance(max((upcoming.run_after - clock.now()).total_seconds(), 0) + 0.001)
    raise AssertionError(f"the pipeline did not settle in {rounds} rounds")
