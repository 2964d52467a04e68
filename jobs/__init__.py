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
    jobs.remote_handler("reports.render", queue="render")  # run by remote workers (jobs.remote)
    client = jobs.RemoteClient(url, token, worker="pod-a")  # ...which claim over HTTP (no Django)
    jobs.wake("breaker:reports")                         # ...and end that wait early

``import jobs`` runs while Django loads its apps, before the models can be imported (an
installed app's package is imported first), and ``jobs.engine``, ``jobs.events`` and
``jobs.why`` read the models when they are imported. So this module imports nothing of
the engine: each public name is imported from its module the first time it is read
(``__getattr__``), and kept here. Type checkers read the imports under
``TYPE_CHECKING``, which name the same objects.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appsettings import AppSettings
    from jobs.arguments import storable_json
    from jobs.backoff import Backoff, Exponential, Fibonacci, Fixed, Schedule
    from jobs.clock import now
    from jobs.context import JobContext
    from jobs.engine import (
        cancel,
        enqueue,
        enqueue_many,
        enqueue_once,
        recover,
        retry,
        run_now,
        wake,
    )
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
    from jobs.events import publish
    from jobs.history import History
    from jobs.metrics import register_collector

    # The job model, for apps' annotations (``def f(job: jobs.Job)``) only: code gets its
    # jobs from the functions here, so it is not a public name at run time.
    from jobs.models import Job  # noqa: F401
    from jobs.payloads import ApiPayload, TenantObject
    from jobs.pipelines import busy as busy_pipelines
    from jobs.pipelines import jobs_of as pipeline_jobs
    from jobs.pipelines import over as pipelines_over
    from jobs.pipelines import state_of as pipeline_state
    from jobs.redaction import redact_secrets, without_traceback
    from jobs.registry import Cron, Handler, RemoteHooks, handler
    from jobs.registry import remote as remote_handler
    from jobs.remote_client import ControlPlaneError, JobLost, RemoteClient, RemoteJob
    from jobs.sql import execute as execute_prepared
    from jobs.why import explain
    from jobs.why import live_worker_count as live_workers
    from jobs.worker import run_until_idle

__all__ = [
    "ApiPayload",
    "AppSettings",
    "Backoff",
    "ControlPlaneError",
    "Cron",
    "Enqueued",
    "Exponential",
    "Fibonacci",
    "Fixed",
    "Handler",
    "History",
    "IllegalTransition",
    "InvalidArgument",
    "InvalidPayload",
    "JobContext",
    "JobLost",
    "LeaseLost",
    "PermanentError",
    "Prerequisite",
    "RemoteClient",
    "RemoteHooks",
    "RemoteJob",
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
    "register_collector",
    "remote_handler",
    "retry",
    "run_now",
    "run_until_idle",
    "storable_json",
    "wake",
    "without_traceback",
]

# Where each public name is defined, as the imports under TYPE_CHECKING say (a test holds
# the two to each other): the module, and the name there.
_SOURCES: dict[str, tuple[str, str]] = {
    "ApiPayload": ("jobs.payloads", "ApiPayload"),
    "AppSettings": ("appsettings", "AppSettings"),
    "Backoff": ("jobs.backoff", "Backoff"),
    "ControlPlaneError": ("jobs.remote_client", "ControlPlaneError"),
    "Cron": ("jobs.registry", "Cron"),
    "Enqueued": ("jobs.enqueueing", "Enqueued"),
    "Exponential": ("jobs.backoff", "Exponential"),
    "Fibonacci": ("jobs.backoff", "Fibonacci"),
    "Fixed": ("jobs.backoff", "Fixed"),
    "Handler": ("jobs.registry", "Handler"),
    "History": ("jobs.history", "History"),
    "IllegalTransition": ("jobs.errors", "IllegalTransition"),
    "InvalidArgument": ("jobs.errors", "InvalidArgument"),
    "InvalidPayload": ("jobs.errors", "InvalidPayload"),
    "JobContext": ("jobs.context", "JobContext"),
    "JobLost": ("jobs.remote_client", "JobLost"),
    "LeaseLost": ("jobs.errors", "LeaseLost"),
    "PermanentError": ("jobs.errors", "PermanentError"),
    "Prerequisite": ("jobs.enqueueing", "Prerequisite"),
    "RemoteClient": ("jobs.remote_client", "RemoteClient"),
    "RemoteHooks": ("jobs.registry", "RemoteHooks"),
    "RemoteJob": ("jobs.remote_client", "RemoteJob"),
    "Schedule": ("jobs.backoff", "Schedule"),
    "Snooze": ("jobs.errors", "Snooze"),
    "TenantObject": ("jobs.payloads", "TenantObject"),
    "TransientError": ("jobs.errors", "TransientError"),
    "UnknownJobType": ("jobs.errors", "UnknownJobType"),
    "busy_pipelines": ("jobs.pipelines", "busy"),
    "cancel": ("jobs.engine", "cancel"),
    "enqueue": ("jobs.engine", "enqueue"),
    "enqueue_many": ("jobs.engine", "enqueue_many"),
    "enqueue_once": ("jobs.engine", "enqueue_once"),
    "execute_prepared": ("jobs.sql", "execute"),
    "explain": ("jobs.why", "explain"),
    "handler": ("jobs.registry", "handler"),
    "live_workers": ("jobs.why", "live_worker_count"),
    "now": ("jobs.clock", "now"),
    "pipeline_jobs": ("jobs.pipelines", "jobs_of"),
    "pipeline_state": ("jobs.pipelines", "state_of"),
    "pipelines_over": ("jobs.pipelines", "over"),
    "publish": ("jobs.events", "publish"),
    "recover": ("jobs.engine", "recover"),
    "redact_secrets": ("jobs.redaction", "redact_secrets"),
    "register_collector": ("jobs.metrics", "register_collector"),
    "remote_handler": ("jobs.registry", "remote"),
    "retry": ("jobs.engine", "retry"),
    "run_now": ("jobs.engine", "run_now"),
    "run_until_idle": ("jobs.worker", "run_until_idle"),
    "storable_json": ("jobs.arguments", "storable_json"),
    "wake": ("jobs.engine", "wake"),
    "without_traceback": ("jobs.redaction", "without_traceback"),
}


# Hidden from type checkers: a module with ``__getattr__`` would have them take any
# misspelt ``jobs.name`` for a real one.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """A public name, imported from its module when first read (once the apps are
        ready, for the engine's) and kept in this module, so the next read costs nothing."""
        try:
            module, attribute = _SOURCES[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
