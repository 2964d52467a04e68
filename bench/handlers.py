"""The no-op job of the benchmark, once per system under test.

Conveyor registers ``bench.noop`` (loaded through ``JOBS_HANDLER_MODULES=bench.handlers``);
django-q2 calls ``bench.handlers.dq_noop`` by its dotted path. procrastinate's task lives
in ``bench.procrastinate_app`` so that its worker does not need Django.
"""

from __future__ import annotations

from typing import Any

import jobs
from bench import probe


@jobs.handler("bench.noop", max_attempts=3)
def noop(ctx: jobs.JobContext) -> None:
    probe.started(ctx.payload.get("probe"))


def dq_noop(probe_id: str | None = None) -> Any:
    probe.started(probe_id)
