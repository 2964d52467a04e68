"""The engine's public functions as ``jobs`` exports them (``jobs.enqueue`` …).

``jobs`` is imported while Django loads its apps, before any model can be: Django imports
each installed app's package first. ``jobs.engine``, ``jobs.events`` and ``jobs.why`` read
the models when they are imported, so ``jobs`` cannot import them; it imports these
functions instead, which have the same signatures (a test holds them to it) and import
their module when first called, once the apps are ready.

Each call costs one more function call and a look-up in ``sys.modules``: nothing next to
the database round trip behind it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg
    from django.db.models import QuerySet

    from jobs.enqueueing import Enqueued
    from jobs.models import Event, Job


def enqueue(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    run_after: datetime | None = None,
    priority: int = 0,
    queue: str | None = None,
    unique_key: str | None = None,
    pending_key: str | None = None,
    concurrency_key: str | None = None,
    pipeline: uuid.UUID | str | None = None,
    parent: Job | int | None = None,
    after: Sequence[Job | int] | None = None,
    tenant: Any = None,
    created_by: Any = None,
    max_attempts: int | None = None,
) -> Job:
    """Enqueue one job in the caller's transaction and return it; a unique or pending key
    that another job holds returns that job instead. With ``after``, the job waits until
    every job listed has finished (a fan-in). Every argument is checked first
    (``InvalidArgument`` names the one refused). See ``jobs.engine.enqueue``."""
    from jobs import engine

    return engine.enqueue(
        name,
        payload,
        run_after=run_after,
        priority=priority,
        queue=queue,
        unique_key=unique_key,
        pending_key=pending_key,
        concurrency_key=concurrency_key,
        pipeline=pipeline,
        parent=parent,
        after=after,
        tenant=tenant,
        created_by=created_by,
        max_attempts=max_attempts,
    )


def enqueue_once(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    unique_key: str | None = None,
    pending_key: str | None = None,
    **options: Any,
) -> Enqueued:
    """``enqueue`` with a key, saying whether this call created the job
    (``Enqueued.created``). See ``jobs.engine.enqueue_once``."""
    from jobs import engine

    return engine.enqueue_once(name, payload, unique_key=unique_key, pending_key=pending_key, **options)


def enqueue_many(
    name: str,
    payloads: Sequence[dict[str, Any]],
    *,
    unique_keys: Sequence[str | None] | None = None,
    pending_keys: Sequence[str | None] | None = None,
    run_after: datetime | None = None,
    priority: int = 0,
    queue: str | None = None,
    concurrency_key: str | None = None,
    pipeline: uuid.UUID | str | None = None,
    parent: Job | int | None = None,
    after: Sequence[Job | int] | None = None,
    tenant: Any = None,
    created_by: Any = None,
    max_attempts: int | None = None,
) -> list[int]:
    """Insert one job per payload in a single statement, in the caller's transaction;
    return the new ids in the order of their payloads (a payload whose key another job
    holds is skipped). See ``jobs.engine.enqueue_many``."""
    from jobs import engine

    return engine.enqueue_many(
        name,
        payloads,
        unique_keys=unique_keys,
        pending_keys=pending_keys,
        run_after=run_after,
        priority=priority,
        queue=queue,
        concurrency_key=concurrency_key,
        pipeline=pipeline,
        parent=parent,
        after=after,
        tenant=tenant,
        created_by=created_by,
        max_attempts=max_attempts,
    )


def publish(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    tenant: Any = None,
    pipeline: Any = None,
    created_by: Any = None,
) -> Event:
    """Record event ``name`` and enqueue a delivery job for each subscribed handler, in
    the caller's transaction. See ``jobs.events.publish``."""
    from jobs import events

    return events.publish(name, payload, tenant=tenant, pipeline=pipeline, created_by=created_by)


def execute_prepared(statement: str, params: dict[str, Any], *, binary: bool = False) -> psycopg.Cursor:
    """Run ``statement``, whose parameters are named (``params`` holds their values), on
    Django's connection, in its current transaction, as a statement prepared once per
    connection: for a pipeline's own per-batch statements, which PostgreSQL then plans
    once rather than on every call, and for bulk statements, whose parameters (arrays of
    many thousand values, megabytes of text) then go as they are instead of being
    quoted into the SQL in Python. Returns the psycopg cursor. See ``jobs.sql.execute``."""
    from jobs import sql

    return sql.execute(statement, params, binary=binary)


def recover(job: Job, *, actor: Any = None, reason: str = "") -> Job:
    """Operator: a stuck job runs again now. See ``jobs.engine.recover``."""
    from jobs import engine

    return engine.recover(job, actor=actor, reason=reason)


def retry(job: Job, *, actor: Any = None, reason: str = "") -> Job:
    """Operator: a failed or cancelled job runs again from scratch. See ``jobs.engine.retry``."""
    from jobs import engine

    return engine.retry(job, actor=actor, reason=reason)


def cancel(job: Job, *, actor: Any = None, reason: str = "") -> Job:
    """Operator: stop a pending job, or fence out a running one. See ``jobs.engine.cancel``."""
    from jobs import engine

    return engine.cancel(job, actor=actor, reason=reason)


def run_now(job: Job, *, actor: Any = None, reason: str = "") -> Job:
    """Operator: a pending job waiting for its run_after becomes due immediately. See
    ``jobs.engine.run_now``."""
    from jobs import engine

    return engine.run_now(job, actor=actor, reason=reason)


def wake(key: str) -> int:
    """Make every job snoozed with ``Snooze(..., wake_on=key)`` due now, in the caller's
    transaction (effective at commit); returns how many. See ``jobs.engine.wake``."""
    from jobs import engine

    return engine.wake(key)


def explain(job: Job) -> str:
    """One line an operator can act on: why the job is (not) running. See
    ``jobs.why.explain``."""
    from jobs import why

    return why.explain(job)


def run_until_idle() -> int:
    """Run due jobs in this process until none is left; returns how many ran. For
    commands that finish what they started without a cluster, and for tests."""
    from jobs import worker

    return worker.run_until_idle()


def live_workers() -> int:
    """How many engine workers heartbeat now; 0 when no cluster runs. For commands that
    run jobs inline when alone: with a cluster running, they hand their jobs to it
    instead of racing its workers for them."""
    from jobs import clock, why

    return why.live_workers(clock.now()).count()


def busy_pipelines(pipeline_ids: Iterable[uuid.UUID | str]) -> set[uuid.UUID]:
    """The pipelines among ``pipeline_ids`` that have a pending or running job. See
    ``jobs.pipelines.busy``."""
    from jobs import pipelines

    return pipelines.busy(pipeline_ids)


def pipelines_over(job_ids: Iterable[int], *, before: datetime) -> set[int]:
    """The jobs among ``job_ids`` whose whole pipeline had finished before ``before`` (a
    job retention removed counts). See ``jobs.pipelines.over``."""
    from jobs import pipelines

    return pipelines.over(job_ids, before=before)


def pipeline_jobs(pipeline_id: uuid.UUID | str, within: QuerySet[Job] | None = None) -> list[Job]:
    """Every job of a pipeline, in the order they were enqueued (``within``: the jobs the
    caller may see). See ``jobs.pipelines.jobs_of``."""
    from jobs import pipelines

    return pipelines.jobs_of(pipeline_id, within)


def pipeline_state(jobs: Iterable[Job]) -> str:
    """running while any of a pipeline's ``jobs`` is unfinished; then failed, cancelled,
    or succeeded. See ``jobs.pipelines.summary``."""
    from jobs import pipelines

    return pipelines.summary(job.state for job in jobs)
