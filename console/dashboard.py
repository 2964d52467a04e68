"""The operators' dashboard figures: throughput, duration, failures and lag per job type.

Plain queries, shared by the API (``GET /api/jobs/dashboard/``) and the admin dashboard.
They take querysets that the caller has already narrowed to what its user may see
(``tenancy.scoping.scope_queryset``), so tenancy is decided in one place and these
functions never need to know who is asking. Time comes from the engine's clock, so tests
compute the expected figures by hand.

The admin page adds time series for its charts (``board``): the same rows and the same
aggregates, grouped by ``date_bin`` buckets as well as by type — one query per chart
family however many buckets — and the two job lists an operator acts on: the oldest
due jobs and the running jobs stuck past their lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Aggregate,
    Count,
    DateTimeField,
    F,
    FloatField,
    Func,
    Min,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import Least

from jobs import clock, registry
from jobs.models import Job, JobEvent, JobQuerySet

# The windows an operator can pick; anything else is refused rather than guessed.
WINDOWS: dict[str, timedelta] = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}

# The chart buckets of each window: between a dozen and thirty bars, never one per row.
BUCKETS: dict[str, timedelta] = {
    "15m": timedelta(minutes=1),
    "1h": timedelta(minutes=5),
    "24h": timedelta(hours=1),
    "7d": timedelta(hours=6),
}
# How many jobs the oldest-due and stuck lists show.
LIST_LIMIT = 10

# Counted from the history; this order matches the partial index jobs_jobevent_incident_idx.
INCIDENT_KINDS = [JobEvent.Kind.RETRY_SCHEDULED, JobEvent.Kind.RESCUED]


@dataclass(frozen=True)
class TypeFigures:
    """One job type's figures over a window (durations in seconds)."""

    type: str
    finished: int
    succeeded: int
    failed: int
    cancelled: int
    throughput_per_min: float
    failure_rate: float | None
    p50_seconds: float | None
    p95_seconds: float | None
    retries: int
    rescues: int


@dataclass(frozen=True)
class QueueLag:
    """How far behind a queue is: its claimable jobs and how long the oldest has waited."""

    queue: str
    due: int
    oldest_due_at: datetime
    lag_seconds: float


@dataclass(frozen=True)
class Dashboard:
    window: str
    since: datetime
    until: datetime
    types: list[TypeFigures]
    queues: list[QueueLag]
    expired_leases: int


class PercentileCont(Aggregate):
    """PostgreSQL's ordered-set aggregate ``percentile_cont(f) WITHIN GROUP (ORDER BY x)``:
    an exact, interpolated percentile computed in the same GROUP BY as the counts."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        if not 0 <= fraction <= 1:
            raise ValueError(f"a percentile fraction lies in [0, 1], got {fraction}")
        # A float formatted by Python, never user input: safe to place in the SQL text.
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


def _seconds_between(start: str, end: str) -> Func:
    return Func(F(end) - F(start), template="EXTRACT(EPOCH FROM %(expressions)s)", output_field=FloatField())


def parse_window(name: str) -> timedelta:
    """The window called ``name``; ValueError naming the accepted ones otherwise."""
    try:
        return WINDOWS[name]
    except KeyError:
        raise ValueError(f"unknown window {name!r}; use one of {', '.join(WINDOWS)}") from None


def finished_by_type(
    since: datetime, until: datetime, *, jobs: JobQuerySet | None = None
) -> QuerySet[Job, Mapping[str, Any]]:
    """One GROUP BY over jobs finished in ``[since, until]`` (a range scan of
    ``jobs_job_finished_idx``): per type the outcome counts and both duration percentiles.

    Durations span first start to finish, retries included, and cover succeeded and
    failed jobs only: a cancellation's timing is an operator's, not the handler's.
    """
    return _finished_in(since, until, jobs).values("type").annotate(**_finished_aggregates())


def _finished_in(since: datetime, until: datetime, jobs: JobQuerySet | None) -> JobQuerySet:
    jobs = Job.objects.all() if jobs is None else jobs
    return jobs.filter(finished_at__gte=since, finished_at__lte=until).order_by()


def _finished_aggregates() -> dict[str, Aggregate]:
    ran = Q(state__in=[Job.State.SUCCEEDED, Job.State.FAILED], started_at__isnull=False)
    duration = _seconds_between("started_at", "finished_at")
    return {
        "finished": Count("id"),
        "succeeded": Count("id", filter=Q(state=Job.State.SUCCEEDED)),
        "failed": Count("id", filter=Q(state=Job.State.FAILED)),
        "cancelled": Count("id", filter=Q(state=Job.State.CANCELLED)),
        "p50": PercentileCont(duration, 0.5, filter=ran),
        "p95": PercentileCont(duration, 0.95, filter=ran),
    }


def incidents_by_type(
    since: datetime, until: datetime, *, events: QuerySet[JobEvent] | None = None
) -> QuerySet[JobEvent, Mapping[str, Any]]:
    """Retries scheduled and rescues per job type, from the history rows in the window
    (a range scan of the partial index ``jobs_jobevent_incident_idx``)."""
    return _incidents_in(since, until, events).values("job__type").annotate(**_incident_counts())


def _incidents_in(since: datetime, until: datetime, events: QuerySet[JobEvent] | None) -> QuerySet[JobEvent]:
    events = JobEvent.objects.all() if events is None else events
    return events.filter(kind__in=INCIDENT_KINDS, at__gte=since, at__lte=until).order_by()


def _incident_counts() -> dict[str, Count]:
    return {
        "retries": Count("id", filter=Q(kind=JobEvent.Kind.RETRY_SCHEDULED)),
        "rescues": Count("id", filter=Q(kind=JobEvent.Kind.RESCUED)),
    }


def type_figures(
    since: datetime,
    until: datetime,
    *,
    jobs: JobQuerySet | None = None,
    events: QuerySet[JobEvent] | None = None,
) -> list[TypeFigures]:
    """Per job type seen in the window, finished or merely retried: counts, throughput
    (finished per minute), failure rate = failed / (succeeded + failed) (None when nothing
    ran to an outcome), p50/p95 durations, retries and rescues."""
    by_type = {row["type"]: row for row in finished_by_type(since, until, jobs=jobs)}
    incidents = {
        row["job__type"]: (row["retries"], row["rescues"])
        for row in incidents_by_type(since, until, events=events)
    }
    minutes = (until - since).total_seconds() / 60
    return [
        _figures(name, by_type.get(name), incidents.get(name, (0, 0)), minutes)
        for name in sorted(by_type.keys() | incidents.keys())
    ]


def _figures(
    name: str, row: Mapping[str, Any] | None, incidents: tuple[int, int], minutes: float
) -> TypeFigures:
    row = row or {"finished": 0, "succeeded": 0, "failed": 0, "cancelled": 0, "p50": None, "p95": None}
    outcomes = row["succeeded"] + row["failed"]
    return TypeFigures(
        type=name,
        finished=row["finished"],
        succeeded=row["succeeded"],
        failed=row["failed"],
        cancelled=row["cancelled"],
        throughput_per_min=row["finished"] / minutes if minutes else 0.0,
        failure_rate=row["failed"] / outcomes if outcomes else None,
        p50_seconds=row["p50"],
        p95_seconds=row["p95"],
        retries=incidents[0],
        rescues=incidents[1],
    )


def queue_lag(now: datetime, *, jobs: JobQuerySet | None = None) -> list[QueueLag]:
    """Per queue, the jobs a worker could claim right now and how long the oldest of them
    has been due. Children waiting on their parent and jobs whose concurrency key is held
    are not lag (no worker could take them), so this uses the claim's own definition."""
    jobs = Job.objects.all() if jobs is None else jobs
    rows = (
        jobs.claimable(now, registry.names(), [])
        .order_by()
        .values("queue")
        .annotate(due=Count("id"), oldest=Min("run_after"))
        .order_by("queue")
    )
    return [
        QueueLag(
            queue=row["queue"],
            due=row["due"],
            oldest_due_at=row["oldest"],
            lag_seconds=(now - row["oldest"]).total_seconds(),
        )
        for row in rows
    ]


def expired_leases(now: datetime, *, jobs: JobQuerySet | None = None) -> int:
    """Running jobs whose worker stopped heartbeating; the reaper should take them back
    within seconds, so anything lasting here means the reaper is not running."""
    jobs = Job.objects.all() if jobs is None else jobs
    return jobs.lease_expired(now).count()


def figures(
    window: str, *, jobs: JobQuerySet | None = None, events: QuerySet[JobEvent] | None = None
) -> Dashboard:
    """Everything the dashboard shows for ``window`` (one of WINDOWS), ending now."""
    until = clock.now()
    since = until - parse_window(window)
    return Dashboard(
        window=window,
        since=since,
        until=until,
        types=type_figures(since, until, jobs=jobs, events=events),
        queues=queue_lag(until, jobs=jobs),
        expired_leases=expired_leases(until, jobs=jobs),
    )


# --- time series for the charts ------------------------------------------------------------


class DateBin(Func):
    """PostgreSQL's ``date_bin(stride, source, origin)``: the start of the stride-wide
    bucket holding ``source``, buckets counted from ``origin``."""

    function = "date_bin"
    output_field = DateTimeField()

    def __init__(self, stride: timedelta, source: Any, origin: datetime) -> None:
        super().__init__(Value(stride), source, Value(origin, output_field=DateTimeField()))


@dataclass(frozen=True)
class Buckets:
    """The equal intervals a window is cut into for the charts, oldest first."""

    since: datetime
    stride: timedelta
    count: int

    @classmethod
    def of(cls, since: datetime, until: datetime, stride: timedelta) -> Buckets:
        return cls(since=since, stride=stride, count=max(1, -(-(until - since) // stride)))

    @property
    def starts(self) -> list[datetime]:
        return [self.since + index * self.stride for index in range(self.count)]

    def of_field(self, name: str) -> Least:
        """The bucket of a timestamp column; a row stamped exactly at the window's end
        joins the last bucket, so the buckets add up to the window's figures."""
        return Least(
            DateBin(self.stride, F(name), self.since), Value(self.starts[-1], output_field=DateTimeField())
        )

    def index(self, start: datetime) -> int:
        return int((start - self.since) // self.stride)


@dataclass(frozen=True)
class TypeSeries:
    """One job type's figures per bucket (lists aligned with ``Buckets.starts``); the
    percentiles are None for a bucket in which nothing ran to an outcome."""

    type: str
    finished: list[int]
    failed: list[int]
    p50_seconds: list[float | None]
    p95_seconds: list[float | None]
    retries: list[int]
    rescues: list[int]


def finished_series(
    buckets: Buckets, until: datetime, *, jobs: JobQuerySet | None = None
) -> QuerySet[Job, Mapping[str, Any]]:
    """The finished jobs' figures per type and bucket: one GROUP BY over the same rows
    (and the same definitions) as ``finished_by_type``."""
    return (
        _finished_in(buckets.since, until, jobs)
        .annotate(bucket=buckets.of_field("finished_at"))
        .values("type", "bucket")
        .annotate(**_finished_aggregates())
    )


def incident_series(
    buckets: Buckets, until: datetime, *, events: QuerySet[JobEvent] | None = None
) -> QuerySet[JobEvent, Mapping[str, Any]]:
    """Retries and rescues per type and bucket, one GROUP BY like ``incidents_by_type``."""
    return (
        _incidents_in(buckets.since, until, events)
        .annotate(bucket=buckets.of_field("at"))
        .values("job__type", "bucket")
        .annotate(**_incident_counts())
    )


def type_series(
    buckets: Buckets,
    until: datetime,
    *,
    jobs: JobQuerySet | None = None,
    events: QuerySet[JobEvent] | None = None,
) -> list[TypeSeries]:
    """Per job type seen in the window, its series; empty buckets hold zeros (or None
    for the percentiles). Two queries in all, whatever the number of buckets or types."""
    n = buckets.count
    series: dict[str, TypeSeries] = {}

    def of(name: str) -> TypeSeries:
        if name not in series:
            series[name] = TypeSeries(name, [0] * n, [0] * n, [None] * n, [None] * n, [0] * n, [0] * n)
        return series[name]

    for row in finished_series(buckets, until, jobs=jobs):
        one, at = of(row["type"]), buckets.index(row["bucket"])
        one.finished[at], one.failed[at] = row["finished"], row["failed"]
        one.p50_seconds[at], one.p95_seconds[at] = row["p50"], row["p95"]
    for row in incident_series(buckets, until, events=events):
        one, at = of(row["job__type"]), buckets.index(row["bucket"])
        one.retries[at], one.rescues[at] = row["retries"], row["rescues"]
    return [series[name] for name in sorted(series)]


# --- jobs that need an operator's eye ------------------------------------------------------


@dataclass(frozen=True)
class DueJob:
    """A claimable job and how long it has been due (now − run_after)."""

    job: Job
    age_seconds: float


@dataclass(frozen=True)
class StuckJob:
    """A running job whose lease lapsed ``overdue_seconds`` ago: its worker is gone and
    the reaper has not taken it back."""

    job: Job
    overdue_seconds: float


def oldest_due(now: datetime, *, jobs: JobQuerySet | None = None, limit: int = LIST_LIMIT) -> list[DueJob]:
    """The claimable jobs that have waited longest, oldest first: the head of the queue
    lag (the first one's age is the largest ``QueueLag.lag_seconds``)."""
    jobs = Job.objects.all() if jobs is None else jobs
    rows = jobs.claimable(now, registry.names(), []).order_by("run_after", "id")[:limit]
    return [DueJob(job, (now - job.run_after).total_seconds()) for job in rows]


def stuck(now: datetime, *, jobs: JobQuerySet | None = None, limit: int = LIST_LIMIT) -> list[StuckJob]:
    """The running jobs whose lease expired longest ago (``expired_leases`` counts them)."""
    jobs = Job.objects.all() if jobs is None else jobs
    rows = jobs.lease_expired(now).order_by("lease_expires_at", "id")[:limit]
    return [
        StuckJob(job, (now - job.lease_expires_at).total_seconds())
        for job in rows
        if job.lease_expires_at is not None  # all of them: their lease lapsed
    ]


@dataclass(frozen=True)
class Board:
    """The admin dashboard: the API's figures plus the charts' series and the job lists,
    all as of the same instant (``figures.until``)."""

    figures: Dashboard
    buckets: Buckets
    series: list[TypeSeries]
    oldest_due: list[DueJob]
    stuck: list[StuckJob]


def board(
    window: str,
    *,
    jobs: JobQuerySet | None = None,
    events: QuerySet[JobEvent] | None = None,
    limit: int = LIST_LIMIT,
) -> Board:
    """Everything the admin dashboard shows for ``window``; its figures are those of
    ``figures`` (the API's) and the series cover exactly the same rows."""
    summary = figures(window, jobs=jobs, events=events)
    buckets = Buckets.of(summary.since, summary.until, BUCKETS[window])
    return Board(
        figures=summary,
        buckets=buckets,
        series=type_series(buckets, summary.until, jobs=jobs, events=events),
        oldest_due=oldest_due(summary.until, jobs=jobs, limit=limit),
        stuck=stuck(summary.until, jobs=jobs, limit=limit),
    )
