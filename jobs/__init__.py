"""Conveyor's durable job engine on PostgreSQL.

The public API, for the domain apps and users' own code::

    import jobs

    @jobs.handler("reports.rebuild", max_attempts=3, backoff=jobs.Exponential(base=60, cap=300))
    def rebuild(ctx: jobs.JobContext) -> dict:
        ctx.progress(0, 10, "starting")
        ctx.chain("reports.notify", {"report": ctx.payload["report"]})
        return {"ok": True}

    jobs.enqueue("reports.rebuild", {"report": 7})       # in the caller's transaction
    jobs.enqueue_once("reports.rebuild", {"report": 7}, pending_key="report:7").created
    jobs.publish("ReportRebuilt", {"report": 7})         # outbox: one delivery job per subscriber
    parts = jobs.enqueue_many("reports.part", [{"part": n} for n in range(8)])
    jobs.enqueue("reports.merge", after=parts)           # fan-in: runs once all eight finished
    raise jobs.Snooze(300, "breaker open", wake_on="breaker:reports")  # in a handler: wait
    jobs.wake("breaker:reports")                         # ...and end that wait early

``import jobs`` runs while Django loads its apps, before the models can be imported (an
installed app's package is imported first), so everything it imports here must not
need them: the engine's functions come through ``jobs.public``, which imports the engine
when called, and ``JobContext`` and ``Enqueued`` name the models in annotations only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.arguments import storable_json
from jobs.backoff import Backoff, Exponential, Fibonacci, Fixed, Schedule
from jobs.clock import now
from jobs.context import JobContext
from jobs.enqueueing import Enqueued, Prerequisite
from jobs.errors import (
    IllegalTransition,
    InvalidArgument,
    InvalidPayload,
    LeaseLost,
    PermanentError,
    Snooze,
    TransientError,
    UnknownJobType,
)
from jobs.payloads import ApiPayload, TenantObject
from jobs.public import (
    busy_pipelines,
    cancel,
    enqueue,
    enqueue_many,
    enqueue_once,
    execute_prepared,
    explain,
    live_workers,
    pipeline_jobs,
    pipeline_state,
    pipelines_over,
    publish,
    recover,
    retry,
    run_now,
    run_until_idle,
    wake,
)
from jobs.redaction import redact_secrets, without_traceback
from jobs.registry import Handler, handler

if TYPE_CHECKING:
    # The job model, for apps' annotations (``def f(job: jobs.Job)``) only: Django imports
    # this package before any model exists, so it is not bound at run time. Code gets
    # its jobs from the functions above.
    from jobs.models import Job  # noqa: F401

__all__ = [
    "ApiPayload",
    "Backoff",
    "Enqueued",
    "Exponential",
    "Fibonacci",
    "Fixed",
    "Handler",
    "IllegalTransition",
    "InvalidArgument",
    "InvalidPayload",
    "JobContext",
    "LeaseLost",
    "PermanentError",
    "Prerequisite",
    "Schedule",
    "Snooze",
    "TenantObject",
    "TransientError",
    "UnknownJobType",
    "busy_pipelines",
    "cancel",
    "enqueue",
    "enqueue_many",
    "enqueue_once",
    "execute_prepared",
    "explain",
    "handler",
    "live_workers",
    "now",
    "pipeline_jobs",
    "pipeline_state",
    "pipelines_over",
    "publish",
    "recover",
    "redact_secrets",
    "retry",
    "run_now",
    "run_until_idle",
    "storable_json",
    "wake",
    "without_traceback",
]
