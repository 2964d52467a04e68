"""Running a run's pipeline to its end in the test process, on the test clock."""

from __future__ import annotations

from typing import Any

import pytest

import jobs
from ingest.runs import services
from ingest.runs.models import IngestRun
from jobs.models import Job
from tenancy.models import Tenant
from tests.support.ingest import builders, plugins


def drain(clock, rounds: int = 50) -> None:
    """Run every due job; move the clock to the next one; until nothing is left."""
    for _ in range(rounds):
        jobs.run_until_idle()
        upcoming = Job.objects.filter(state="pending").order_by("run_after").first()
        if upcoming is None:
            return
        clock.advance(max((upcoming.run_after - clock.now()).total_seconds(), 0) + 0.001)
    raise AssertionError("the pipeline did not settle")


def stalled_after_a_crash(tenant: Tenant, clock, monkeypatch: pytest.MonkeyPatch) -> IngestRun:
    """A run whose source raised an unexpected exception at every attempt (the engine
    keeps a traceback for those), failed by the sweep as stalled."""

    def crash(self: Any, config: Any, session: Any, batch_size: int, *, tenant: str) -> Any:
        raise RuntimeError("the parser lost its place")

    monkeypatch.setattr(plugins.Counting, "fetch", crash)
    run = services.start_ingest(builders.source(tenant, batches=1))
    drain(clock)
    clock.advance(services.STALL_GRACE_SECONDS)
    assert services.fail_stalled_runs() == [run.pk]
    run.refresh_from_db()
    return run
