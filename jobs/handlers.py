"""The engine's own job types."""

from __future__ import annotations

from typing import Any

from jobs import retention
from jobs.context import JobContext
from jobs.registry import Cron, handler


@handler(
    "jobs.prune",
    queue="maintenance",
    max_attempts=3,
    atomic=False,
    maintenance=True,
    schedule=Cron("17 * * * *", name="prune-finished-jobs"),
)
def prune(ctx: JobContext) -> dict[str, Any]:
    """Delete finished jobs past their retention (hourly)."""
    return retention.prune().as_dict()
