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

Names resolve lazily so that ``import jobs`` works before Django's apps are ready.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "handler": "jobs.registry",
    "Handler": "jobs.registry",
    "enqueue": "jobs.engine",
    "enqueue_many": "jobs.engine",
    "enqueue_once": "jobs.engine",
    "Enqueued": "jobs.engine",
    "publish": "jobs.events",
    "JobContext": "jobs.context",
    "TransientError": "jobs.errors",
    "PermanentError": "jobs.errors",
    "Snooze": "jobs.errors",
    "UnknownJobType": "jobs.errors",
    "InvalidArgument": "jobs.errors",
    "InvalidPayload": "jobs.errors",
    "LeaseLost": "jobs.errors",
    "IllegalTransition": "jobs.errors",
    "Backoff": "jobs.backoff",
    "Exponential": "jobs.backoff",
    "Fibonacci": "jobs.backoff",
    "Fixed": "jobs.backoff",
    "Schedule": "jobs.backoff",
    "recover": "jobs.engine",
    "retry": "jobs.engine",
    "cancel": "jobs.engine",
    "run_now": "jobs.engine",
    "explain": "jobs.why",
    "ApiPayload": "jobs.payloads",
    "TenantObject": "jobs.payloads",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jobs' has no attribute {name!r}")
    return getattr(import_module(module), name)
