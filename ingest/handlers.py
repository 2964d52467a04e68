"""The app's job types, registered from its parts (the engine imports every app's
``handlers`` module at start-up), and the safety net that spans two of them: runs, and
the handoffs that start runs (``ingest.scraping`` builds on ``ingest.runs``, never the
other way round)."""

from __future__ import annotations

from typing import Any

import jobs
from ingest.runs import handlers  # noqa: F401
from ingest.runs import services as runs
from ingest.scraping import handlers as scraping_handlers  # noqa: F401
from ingest.scraping import services as scraping


@jobs.handler(
    "ingest.ReconcileRuns",
    max_attempts=1,
    maintenance=True,
    # Fails ingest runs that nothing moves any more, every minute (ingest/runs/services.py).
    schedule=jobs.Cron("* * * * *", name="ingest-reconcile-runs"),
)
def reconcile_runs(ctx: jobs.JobContext) -> dict[str, Any]:
    """The safety net: a running run with nothing of its pipeline pending or running
    (its last delivery failed, or died with its worker past its attempts) is failed,
    with the reason its last failed job gave, instead of looking busy forever; and so
    is a handoff whose ingestion job ended without starting its run; and a handoff queued
    without a job whose reference's ingestion is over (one handed off by a migration) is
    queued."""
    settled = queued = 0
    if scraping.handoffs_available():
        settled, queued = scraping.settle_stuck_handoffs(), scraping.queue_waiting()
    return {"failed": runs.fail_stalled_runs(), "handoffs_settled": settled, "handoffs_queued": queued}
