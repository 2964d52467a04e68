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

``import jobs`` runs while Django loads its apps, before the models can be imported (an
installed app's package is imported first), so everything it imports here must not
need them: the engine's functions come through ``jobs.public``, which imports the engine
when called, and ``JobContext`` and ``Enqueued`` name the models in annotations only.
"""

from __future__ import annotations

from jobs.backoff import Backoff, Exponential, Fibonacci, Fixed, Schedule
from jobs.context import JobContext
from jobs.enqueueing import Enqueued
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
    cancel,
    enqueue,
    enqueue_many,
    enqueue_once,
    explain,
    publish,
    recover,
    retry,
    run_now,
)
from jobs.registry import Handler, handler

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
    "Schedule",
    "Snooze",
    "TenantObject",
    "TransientError",
    "UnknownJobType",
    "cancel",
    "enqueue",
    "enqueue_many",
    "enqueue_once",
    "explain",
    "handler",
    "publish",
    "recover",
    "retry",
    "run_now",
]
