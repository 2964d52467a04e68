"""Reads about pipelines, for the apps and the operator surfaces.

A pipeline is the jobs enqueued under one ``pipeline`` id: an upload's ingest, the
recalculations it queues and the aggregation that follows share one. Apps ask whether
their pipelines are still working and what they did through these functions (re-exported
by ``jobs``) rather than by querying the engine's tables.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from django.db.models import Exists, OuterRef, Q, QuerySet

from jobs import sql
from jobs.models import Job

# A pipeline's summary state, from its jobs' states: the first that any job is in.
_SUMMARY = (
    ("running", Job.UNFINISHED),
    ("failed", (Job.State.FAILED,)),
    ("cancelled", (Job.State.CANCELLED,)),
)


def busy(pipeline_ids: Iterable[uuid.UUID | str]) -> set[uuid.UUID]:
    """The pipelines among ``pipeline_ids`` that have a pending or running job. One
    prepared statement: pages ask this on every request that shows a module."""
    ids = [value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)) for value in pipeline_ids]
    if not ids:
        return set()
    return {row[0] for row in sql.execute(sql.busy_pipelines(), {"ids": ids}).fetchall()}


def over(job_ids: Iterable[int], *, before: datetime) -> set[int]:
    """The jobs among ``job_ids`` whose pipeline was over before ``before``: every job of
    it finished, the last one before then. A job no longer in the table (retention
    removed it) counts too: only finished jobs are removed."""
    ids = set(job_ids)
    if not ids:
        return set()
    active = Job.objects.filter(pipeline_id=OuterRef("pipeline_id")).filter(
        Q(state__in=Job.UNFINISHED) | Q(finished_at__isnull=True) | Q(finished_at__gt=before)
    )
    return ids - set(Job.objects.filter(pk__in=ids).filter(Exists(active)).values_list("pk", flat=True))


def jobs_of(pipeline_id: uuid.UUID | str, within: QuerySet[Job] | None = None) -> list[Job]:
    """Every job of a pipeline in the order they were enqueued, without their payloads;
    ``within``: the jobs the caller may see (a tenant-scoped queryset)."""
    queryset = within if within is not None else Job.objects.all()
    return list(
        queryset.filter(pipeline_id=pipeline_id).select_related("created_by").defer("payload").order_by("id")
    )


def state_of(jobs: Iterable[Job]) -> str:
    """A pipeline's state from its ``jobs``: running while any is unfinished; then failed,
    cancelled, or succeeded."""
    return summary(job.state for job in jobs)


def summary(states: Iterable[str]) -> str:
    """A pipeline's state from its jobs' states: running while any job is unfinished, then
    failed, cancelled, or succeeded when all did."""
    seen = set(states)
    for name, members in _SUMMARY:
        if seen & set(members):
            return name
    return Job.State.SUCCEEDED.value
