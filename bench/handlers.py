"""The jobs of the benchmarks: a no-op once per system under test, and a blocking job.

Conveyor registers ``bench.noop`` (loaded through ``JOBS_HANDLER_MODULES=bench.handlers``);
django-q2 calls ``bench.handlers.dq_noop`` by its dotted path. procrastinate's task lives
in ``bench.procrastinate_app`` so that its worker does not need Django.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jobs
from bench import probe


@jobs.handler("bench.noop", max_attempts=3)
def noop(ctx: jobs.JobContext) -> None:
    probe.started(ctx.payload.get("probe"))


@jobs.handler("bench.block", max_attempts=100)
def block(ctx: jobs.JobContext) -> None:
    """Runs until its release file exists: ``bench/faults.py`` kills its worker meanwhile."""
    release = Path(ctx.payload["release"])
    deadline = time.monotonic() + ctx.payload.get("max_wait", 120)
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def dq_noop(probe_id: str | None = None) -> Any:
    probe.started(probe_id)
