"""The operations overview's figures for the engine: what needs a person now.

Failed and rescued in the last hour, running jobs stuck past their lease, the oldest due
job of each queue, the busiest pipelines and the biggest failure groups. Every query
reads a partial index or a bounded range of one, and what could be large is counted no
further than ``CAP`` (shown as "10,000+"): the front page must stay fast with millions
of jobs, where a ``COUNT(*)`` over the table would scan it on every visit. The table's
size is PostgreSQL's own estimate.

Like ``console.dashboard``, these take querysets already narrowed to what the user
may see, and the engine's clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections
from django.db.models import Count, Model, QuerySet

from console import triage
from jobs import clock, registry
from jobs.models import Job, JobEvent, JobQuerySet

CAP = 10_000
RECENT = timedelta(hours=1)
# The failure groups and busiest pipelines shown; the triage and pipeline pages have more.
TOP = 5


@dataclass(frozen=True)
class Figure:
    """One figure of the overview and the list that explains it. ``tone`` is "bad" when
    the figure means something is wrong, "warn" when it may be; a capped count is shown
    with a "+"."""

    key: str
    label: str
    value: int
    url: str
    tone: str = ""
    capped: bool = False
    note: str = ""

    @property
    def text(self) -> str:
        return f"{self.value:,}{'+' if self.capped else ''}"


@dataclass(frozen=True)
class QueueHead:
    """A queue's due jobs (counted up to ``CAP``) and the one that has waited longest."""

    queue: str
    due: int
    capped: bool
    oldest: Job | None
    waited_seconds: float


@dataclass(frozen=True)
class BusyPipeline:
    pipeline_id: uuid.UUID
    running: int
    types: list[str]


@dataclass(frozen=True)
class Engine:
    now: datetime
    failed: int
    failed_capped: bool
    rescued: int
    stuck: int
    running: int
    queues: list[QueueHead]
    pipelines: list[BusyPipeline]
    failure_groups: list[triage.FailureGroup]
    jobs_estimate: int | None


def capped_count(queryset: QuerySet) -> tuple[int, bool]:
    """``(count, capped)``: COUNT(*) over a LIMITed subquery, which stops at CAP + 1 rows."""
    counted = queryset.order_by()[: CAP + 1].count()
    return min(counted, CAP), counted > CAP


def table_estimate(model: type[Model], using: str = "default") -> int | None:
    """Rows in the table by PostgreSQL's estimate (``pg_class.reltuples``, kept by
    autovacuum); None before the first ANALYZE."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [model._meta.db_table]
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] >= 0 else None


def queue_heads(jobs: JobQuerySet, queues: Iterable[str], now: datetime) -> list[QueueHead]:
    """Per queue, the pending jobs due now and the longest-waiting of them; queues with
    nothing due are left out.

    Both read the queue's next CAP jobs in claim order (jobs_job_claim_idx): an index by
    ``run_after`` would answer "the oldest" over any backlog, but every enqueue would pay
    for it. Below CAP due jobs the answer is exact; past it, it is the longest-waiting of
    the next CAP to be claimed, which (claims go by priority, then age) is the oldest
    unless a low-priority job waits behind CAP others.
    """
    heads = []
    for queue in sorted(set(queues)):
        next_up = (
            jobs.due(now)
            .filter(queue=queue)
            .order_by("-priority", "id")
            .values_list("id", "run_after")[: CAP + 1]
        )
        inner, params = next_up.query.sql_with_params()
        with connections[jobs.db].cursor() as cursor:
            # One walk of jobs_job_claim_idx: how many (up to CAP + 1), and the longest-waiting.
            cursor.execute(
                f"SELECT count(*), (array_agg(id ORDER BY run_after, id))[1], "
                f"min(run_after) FROM ({inner}) AS next_up",
                params,
            )
            count, oldest_id, oldest_at = cursor.fetchone()
        if not count:
            continue
        oldest = Job.objects.only("id", "type", "run_after", "queue").filter(pk=oldest_id).first()
        heads.append(
            QueueHead(queue, min(count, CAP), count > CAP, oldest, (now - oldest_at).total_seconds())
        )
    return sorted(heads, key=lambda head: -head.waited_seconds)


def busiest_pipelines(jobs: QuerySet[Job], limit: int = TOP) -> list[BusyPipeline]:
    """The pipelines holding the most workers now: running jobs (jobs_job_lease_idx keeps them
    apart, and there are only as many as there are workers) grouped by pipeline. The
    maintenance types are left out: a reconciliation loop that runs most of every minute
    would head the list for good."""
    jobs = jobs.exclude(type__in=registry.maintenance_names())
    rows = list(
        jobs.filter(state=Job.State.RUNNING)
        .order_by()
        .values("pipeline_id")
        .annotate(running=Count("id"))
        .order_by("-running", "pipeline_id")[:limit]
    )
    types: dict[uuid.UUID, set[str]] = {row["pipeline_id"]: set() for row in rows}
    for pipeline_id, type_name in jobs.filter(state=Job.State.RUNNING, pipeline_id__in=types).values_list(
        "pipeline_id", "type"
    ):
        types[pipeline_id].add(type_name)
    return [
        BusyPipeline(row["pipeline_id"], row["running"], sorted(types[row["pipeline_id"]])) for row in rows
    ]


def engine(jobs: JobQuerySet, events: QuerySet[JobEvent], queues: Iterable[str]) -> Engine:
    """The engine's figures as of one instant of the engine's clock."""
    now = clock.now()
    since = now - RECENT
    failed, failed_capped = capped_count(jobs.filter(state=Job.State.FAILED, finished_at__gte=since))
    rescued = (
        events.filter(kind=JobEvent.Kind.RESCUED, at__gte=since)  # jobs_jobevent_incident_idx
        .values("job_id")
        .distinct()
        .count()
    )
    return Engine(
        now=now,
        failed=failed,
        failed_capped=failed_capped,
        rescued=rescued,
        stuck=jobs.lease_expired(now).count(),
        running=jobs.filter(state=Job.State.RUNNING).count(),
        queues=queue_heads(jobs, queues, now),
        pipelines=busiest_pipelines(jobs),
        failure_groups=triage.groups(jobs, triage.window_start(triage.DEFAULT_WINDOW, now), limit=TOP),
        jobs_estimate=table_estimate(Job, jobs.db),
    )
