"""Running a run's pipeline to its end in the test process, on the test clock."""

from __future__ import annotations

import jobs
from jobs.models import Job


def drain(clock, rounds: int = 50) -> None:
    """Run every due job; move the clock to the next one; until nothing is left."""
    for _ in range(rounds):
        jobs.run_until_idle()
        upcoming = Job.objects.filter(state="pending").order_by("run_after").first()
        if upcoming is None:
            return
        clock.advance(max((upcoming.run_after - clock.now()).total_seconds(), 0) + 0.001)
    raise AssertionError("the pipeline did not settle")
