"""Prometheus metrics. Counters live in the worker processes (multiprocess mode when
PROMETHEUS_MULTIPROC_DIR is set); job counts by state and type are read from the
database at scrape time, so every web process reports the same truth. Apps add figures
of their own: each registers its collectors in its ``AppConfig.ready()``
(``jobs.register_collector``), and ``/metrics`` reads them at each scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs import scaling

CLAIMS = Counter("conveyor_jobs_claimed", "Jobs claimed by workers.")
OUTCOMES = Counter("conveyor_jobs_outcomes", "Finished attempts by type and outcome.", ["type", "outcome"])
RESCUES = Counter("conveyor_jobs_rescued", "Jobs taken back from dead workers.", ["type"])
DURATION = Histogram(
    "conveyor_job_duration_seconds",
    "Handler run time.",
    ["type"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600, 3600),
)


# The apps' collectors, in the order their apps registered them: each called at every
# scrape for a fresh collector (they read the database then).
_app_collectors: list[Callable[[], Collector]] = []


def register_collector(collector: Callable[[], Collector]) -> None:
    """Have ``/metrics`` show what ``collector()`` (a collector class, most often) collects
    at each scrape. An app calls this from its ``AppConfig.ready()``; registering one
    twice changes nothing."""
    if collector not in _app_collectors:
        _app_collectors.append(collector)


def app_collectors() -> list[Callable[[], Collector]]:
    return list(_app_collectors)


def claimed(count: int) -> None:
    CLAIMS.inc(count)


def finished(type_name: str, outcome: str, seconds: float) -> None:
    OUTCOMES.labels(type_name, outcome).inc()
    DURATION.labels(type_name).observe(seconds)


def rescued(type_name: str) -> None:
    RESCUES.labels(type_name).inc()


class JobStateCollector(Collector):
    """``conveyor_jobs{state,type}``: the job table's counts, from one GROUP BY; and
    ``conveyor_jobs_due{queue}`` (``jobs.scaling``)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db.models import Count

        from jobs.models import Job

        family = GaugeMetricFamily("conveyor_jobs", "Jobs by state and type.", labels=["state", "type"])
        rows = Job.objects.order_by().values_list("state", "type").annotate(n=Count("id"))
        for state, type_name, count in rows:
            family.add_metric([state, type_name], count)
        yield family
        due = GaugeMetricFamily(
            "conveyor_jobs_due",
            "Pending jobs whose run_after has come, by queue: what the cluster's autoscaler scales on.",
            labels=["queue"],
        )
        for queue, count in sorted(scaling.due_by_queue().items()):
            due.add_metric([queue], count)
        yield due


class OutboxCollector(Collector):
    """``conveyor_outbox_undelivered{subscriber}`` and
    ``conveyor_outbox_oldest_undelivered_seconds{subscriber}``: how far each subscriber's
    deliveries lag, from ``jobs.outbox.lag`` (the console's own figures)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from jobs import clock, outbox

        undelivered = GaugeMetricFamily(
            "conveyor_outbox_undelivered",
            "Deliveries whose job is pending or running, by subscriber.",
            labels=["subscriber"],
        )
        oldest = GaugeMetricFamily(
            "conveyor_outbox_oldest_undelivered_seconds",
            "Age of the oldest undelivered event, by subscriber (0 when none is waiting).",
            labels=["subscriber"],
        )
        now = clock.now()
        for lag in outbox.lag():
            undelivered.add_metric([lag.subscriber], lag.undelivered)
            oldest.add_metric([lag.subscriber], lag.oldest_seconds(now) or 0.0)
        yield undelivered
        yield oldest
