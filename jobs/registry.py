"""The handler registry: job type names to the functions that run them.

Each app's ``handlers.py`` registers its handlers with ``@jobs.handler("app.name")``;
``JobsConfig.ready()`` imports them all. A name registered twice is recorded rather
than raised at import time, so that ``manage.py check`` reports every problem at once
(jobs.E001) instead of a traceback on the first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from jobs.backoff import DEFAULT_BACKOFF, Backoff

if TYPE_CHECKING:
    from rest_framework.serializers import Serializer

# A handler takes one argument, the ``jobs.JobContext`` of its run. The registry stores
# the function without naming that class: the context enqueues through the engine, which
# looks handlers up here, so the registry sits below both and imports neither.
HandlerFunc = Callable[[Any], Any]
F = TypeVar("F", bound=HandlerFunc)
# An app's name, then the handler's: ``factors.csv_ingest``, or in a domain's own words
# (``ingest.RunIngester``).
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$")


@dataclass(frozen=True)
class Cron:
    """When django-q2's scheduler enqueues a job of the handler that declares it: a cron
    expression in the cluster's time zone. ``name`` is the schedule's (its django-q2 row
    is ``conveyor:<name>``, and ``JOBS_SCHEDULE_OVERRIDES`` retimes or disables it by that
    name); empty, the job type's."""

    expression: str
    name: str = ""


@dataclass(frozen=True)
class RemoteHooks:
    """What a remote job type does on the engine's side of its jobs' steps, each inside
    the transaction of that step, after the engine's transition succeeded: a hook that
    raises ``jobs.InvalidArgument`` refuses the report (a 400 naming the field), and
    nothing of the step is written.

    - ``describe(job)``: what the worker is told of a job it claimed besides its payload
      (a dict, the claim's ``details``); it may record the claim in the type's own rows.
    - ``on_complete(job, result)``: the success's result, checked and recorded.
    - ``on_fail(job, error, final)``: a failed attempt; ``final`` when no retry follows.
    - ``on_snooze(job, details)``: a snooze's ``details`` (what the worker says it is
      waiting for); returns the seconds to sleep, which override the worker's, or None.
    - ``on_release(job)``: its worker handed the job back unfinished (it is stopping).
    - ``on_operator(job, action, actor, via)``: an operator's action on the job
      (``cancel``, ``retry``, ``replay``, ``recover``, ``run_now``), in its transaction,
      wherever it was taken (the console, the API, a command, the type's own admin); one
      that raises ``jobs.IllegalTransition`` refuses the action.
    - ``time_limit(job)``: the attempt's time limit in seconds, when an operator's
      setting decides it rather than the registration's ``timeout``; None for that.
    """

    describe: Callable[[Any], dict[str, Any]] | None = None
    on_complete: Callable[[Any, Any], None] | None = None
    on_fail: Callable[[Any, str, bool], None] | None = None
    on_snooze: Callable[[Any, dict[str, Any]], float | None] | None = None
    on_release: Callable[[Any], None] | None = None
    on_operator: Callable[[Any, str, Any, str], None] | None = None
    time_limit: Callable[[Any], float | None] | None = None


@dataclass(frozen=True)
class Handler:
    name: str
    func: HandlerFunc
    queue: str = "default"
    max_attempts: int = 5
    backoff: Backoff = DEFAULT_BACKOFF
    lease: float | None = None
    # Seconds a run may take before the worker interrupts it (None: HANDLER_TIMEOUT_SECONDS).
    timeout: float | None = None
    atomic: bool = True
    subscribes: tuple[str, ...] = ()
    # Concurrency keys shared by every tenant's jobs of this type (normally a key applies
    # within the job's tenant only).
    global_keys: bool = False
    # The serializer an API client's payload must pass (``jobs.ApiPayload``); None: the
    # type cannot be enqueued through the API at all.
    api_payload: type[Serializer] | None = None
    # The platform's housekeeping (reconciliation loops, retention), not a pipeline's work.
    maintenance: bool = False
    # When the scheduler enqueues a job of this type on its own (jobs.schedules).
    schedule: Cron | None = None
    # Run by a worker outside the cluster, through the remote-worker API (jobs.remote):
    # the cluster's own workers never claim it, and ``func`` is never called here.
    remote: bool = False
    # A remote type's own bookkeeping, run by the engine on its side (``remote``).
    hooks: RemoteHooks | None = None
    # A local type's own rows kept in step with an operator's action on one of its jobs
    # (``handler``'s ``on_operator``); a remote type's is its hooks'.
    on_operator: Callable[[Any, str, Any, str], None] | None = None

    def __call__(self, ctx: Any) -> Any:
        return self.func(ctx)

    @property
    def operator_hook(self) -> Callable[[Any, str, Any, str], None] | None:
        """What the engine calls in an operator's action on a job of this type, if any."""
        if self.on_operator is not None:
            return self.on_operator
        return self.hooks.on_operator if self.hooks is not None else None

    @property
    def schedule_name(self) -> str:
        """The name of the schedule this handler declares ("" for none)."""
        if self.schedule is None:
            return ""
        return self.schedule.name or self.name


_handlers: dict[str, Handler] = {}
_duplicates: list[tuple[str, str]] = []


def register(handler: Handler) -> Handler:
    if not NAME_RE.match(handler.name):
        raise ValueError(f"handler name {handler.name!r} must be dotted, like 'app.action'")
    if handler.max_attempts < 1:
        raise ValueError(f"handler {handler.name!r}: max_attempts must be at least 1")
    if handler.timeout is not None and handler.timeout <= 0:
        raise ValueError(f"handler {handler.name!r}: timeout must be positive")
    existing = _handlers.get(handler.name)
    if existing is not None and existing.func is not handler.func:
        _duplicates.append((handler.name, _where(handler.func)))
        return existing
    _handlers[handler.name] = handler
    return handler


def handler(
    name: str,
    *,
    queue: str = "default",
    max_attempts: int = 5,
    backoff: Backoff = DEFAULT_BACKOFF,
    lease: float | None = None,
    timeout: float | None = None,
    atomic: bool = True,
    subscribes: tuple[str, ...] | list[str] = (),
    api_payload: type[Serializer] | None = None,
    global_keys: bool = False,
    maintenance: bool = False,
    schedule: Cron | None = None,
    on_operator: Callable[[Any, str, Any, str], None] | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of job type ``name``. It is called
    with the run's ``jobs.JobContext``, and returned unchanged (its type too).

    ``atomic=True`` runs the handler inside the transaction that records its success, so
    its writes and the job's outcome commit together (and a fenced-out attempt's writes
    roll back). Long handlers that commit in batches pass ``atomic=False`` and must be
    idempotent. ``subscribes`` names events whose publication enqueues one delivery job
    for this handler. ``lease`` (seconds without a heartbeat before the job is presumed
    dead) defaults to ``JOBS_LEASE_SECONDS``. ``timeout`` (seconds a run may take; default
    ``JOBS_HANDLER_TIMEOUT_SECONDS``) is enforced by the worker (``jobs.time_limits``): a
    run past it is interrupted and retried like a transient failure. A concurrency key
    applies within the job's tenant; ``global_keys=True`` makes this type's keys one
    across tenants (a resource every tenant shares, such as an outside system that takes
    one caller at a time). ``maintenance=True`` marks the platform's housekeeping (a
    reconciliation loop, retention), which the console's busiest pipelines leave out.
    ``schedule=jobs.Cron("*/5 * * * *", name=...)`` has django-q2's scheduler enqueue one
    job of this type on that cron (one at a time: a run that has not finished is not
    doubled); ``JOBS_SCHEDULE_OVERRIDES`` may retime or disable it.

    ``on_operator(job, action, actor, via)`` keeps the type's own rows in step with what
    operators do to its jobs, wherever they do it (the console, the API, a command, an
    app's admin): the engine calls it in the transaction of each ``cancel``, ``retry``,
    ``replay``, ``recover`` and ``run_now``, after the job's transition, with the job as
    it now is. A hook that raises ``jobs.IllegalTransition`` refuses the action, and
    nothing of it is written. A remote type's is its ``RemoteHooks.on_operator``.

    A payload is untrusted input: only a type that names an ``api_payload`` serializer
    (a ``jobs.ApiPayload``) may be enqueued through ``POST /api/jobs/``, and what reaches
    the handler is that serializer's output, every object it names scoped to the job's
    tenant. Types without one are started by their own services only.
    """

    def decorate(func: F) -> F:
        register(
            Handler(
                name=name,
                func=func,
                queue=queue,
                max_attempts=max_attempts,
                backoff=backoff,
                lease=lease,
                timeout=timeout,
                atomic=atomic,
                subscribes=tuple(subscribes),
                api_payload=api_payload,
                global_keys=global_keys,
                maintenance=maintenance,
                schedule=schedule,
                on_operator=on_operator,
            )
        )
        return func

    return decorate


def remote(
    name: str,
    *,
    queue: str,
    max_attempts: int = 5,
    backoff: Backoff = DEFAULT_BACKOFF,
    lease: float | None = None,
    timeout: float | None = None,
    subscribes: tuple[str, ...] | list[str] = (),
    maintenance: bool = False,
    hooks: RemoteHooks | None = None,
) -> Handler:
    """Register job type ``name`` as run by remote workers (``jobs.remote``) that serve
    ``queue``: they claim its jobs over the internal API and report back, and the engine
    applies its lease, fencing, attempts, ``backoff``, ``timeout``, history and reaper to
    them as to any job. The cluster's workers leave the type alone. ``hooks`` keep the
    type's own rows in step with its jobs (``RemoteHooks``)."""
    return register(
        Handler(
            name=name,
            func=_runs_remotely,
            queue=queue,
            max_attempts=max_attempts,
            backoff=backoff,
            lease=lease,
            timeout=timeout,
            subscribes=tuple(subscribes),
            maintenance=maintenance,
            remote=True,
            hooks=hooks,
        )
    )


def _runs_remotely(ctx: Any) -> Any:
    raise RuntimeError(f"job type {ctx.job.type!r} runs on remote workers, not in the cluster")


def get(name: str) -> Handler | None:
    return _handlers.get(name)


def names() -> list[str]:
    return sorted(_handlers)


def local_names() -> list[str]:
    """The types the cluster's own workers run."""
    return [name for name in names() if not _handlers[name].remote]


def remote_names() -> list[str]:
    """The types remote workers run."""
    return [name for name in names() if _handlers[name].remote]


def all_handlers() -> list[Handler]:
    return [_handlers[name] for name in names()]


def maintenance_names() -> list[str]:
    return [h.name for h in all_handlers() if h.maintenance]


def scheduled() -> list[Handler]:
    """The handlers that declare a schedule, by job type."""
    return [h for h in all_handlers() if h.schedule is not None]


def subscribers(event_name: str) -> list[Handler]:
    return [h for h in all_handlers() if event_name in h.subscribes]


def duplicates() -> list[tuple[str, str]]:
    return list(_duplicates)


def unregister(name: str) -> None:
    """Remove a handler (tests that register throwaway handlers clean up with this)."""
    _handlers.pop(name, None)


def _where(func: HandlerFunc) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
