"""The exports on ``/metrics``, read from their tables at each scrape (so every web
process reports the same figures): jobs and snapshots by status, polls, the claims lost
without word from their worker, and how long completed jobs took.

Registered in ``ExportsConfig.ready()`` (``jobs.register_collector``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.db import connection
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exports.models import EventKind, ExportEvent, ExportJob, JobStatus, Snapshot, SnapshotStatus

# Export jobs that need a worker: waiting for one, being exported by one (it must live
# until it finishes) or submitted (someone must poll them). KEDA's scaler for the export
# workers runs this text verbatim (deploy/), so /metrics shows what it acts on.
UNFINISHED_JOBS_SQL = (
    "SELECT count(*) FROM exports_exportjob WHERE status IN ('pending', 'claimed', 'submitted')"
)

# Seconds from a job's creation to its completion: a small dataset takes seconds, a large
# UNLOAD on Starburst hours.
DURATION_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 10800)


def duration_histogram() -> tuple[list[tuple[str, float]], float]:
    """The cumulative buckets (``+Inf`` last) and the sum of seconds of the completed
    jobs' durations, counted in one query."""
    took = ExpressionWrapper(F("completed_at") - F("created_at"), output_field=DurationField())
    counts = {
        f"le_{bound}": Count("pk", filter=Q(took__lte=timedelta(seconds=bound))) for bound in DURATION_BUCKETS
    }
    figures = (
        ExportJob.objects.filter(status=JobStatus.COMPLETED)
        .annotate(took=took)
        .aggregate(**counts, total=Count("pk"), seconds=Sum("took"))
    )
    # Labelled as prometheus_client's own histograms are (le="1.0").
    buckets = [(floatToGoString(bound), float(figures[f"le_{bound}"])) for bound in DURATION_BUCKETS]
    buckets.append(("+Inf", float(figures["total"])))
    seconds = figures["seconds"].total_seconds() if figures["seconds"] is not None else 0.0
    return buckets, seconds


class ExportCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield self.claims_reset()
        yield from self.job_figures()
        yield self.unfinished()
        yield self.snapshots()
        buckets, seconds = duration_histogram()
        yield HistogramMetricFamily(
            "conveyor_export_duration_seconds",
            "Seconds from an export job's creation to its completion (completed jobs)",
            buckets=buckets,
            sum_value=seconds,
        )

    def claims_reset(self) -> Metric:
        # A claim lost without word from its worker (the engine's reaper took its lease
        # back) ends one of two ways: the reconciliation's pass resets it, or, as a rule
        # (a worker claims every few seconds, the pass runs once a minute), the next
        # claim of its export takes it over first, a claim of a row still claimed.
        lost = Q(kind=EventKind.CLAIM_RESET, actor__isnull=True) | Q(
            kind=EventKind.CLAIMED, from_status=JobStatus.CLAIMED
        )
        return CounterMetricFamily(
            "stale_export_claims_reset",
            "Claims of export jobs lost without word from their worker, reset by the "
            "reconciliation or taken over by the next claim; resets by an operator are "
            "not counted",
            value=ExportEvent.objects.filter(lost).count(),
        )

    def job_figures(self) -> Iterator[Metric]:
        rows = {
            row["status"]: row
            for row in ExportJob.objects.order_by()
            .values("status")
            .annotate(jobs=Count("pk"), polls=Sum("poll_count"))
        }
        by_status = GaugeMetricFamily("conveyor_export_jobs", "Export jobs by status", labels=["status"])
        for value in JobStatus.values:
            by_status.add_metric([value], rows[value]["jobs"] if value in rows else 0)
        yield by_status
        yield CounterMetricFamily(
            "conveyor_export_polls",
            "Polls of submitted export jobs: the sum of their poll counts (a job's count "
            "starts again when it is retried or its claim reset)",
            value=sum(row["polls"] or 0 for row in rows.values()),
        )

    def unfinished(self) -> Metric:
        with connection.cursor() as cursor:
            cursor.execute(UNFINISHED_JOBS_SQL)
            (count,) = cursor.fetchone()
        return GaugeMetricFamily(
            "conveyor_export_jobs_unfinished",
            "Export jobs pending, claimed or submitted: what the export workers' autoscaler scales on",
            value=count,
        )

    def snapshots(self) -> Metric:
        counts = dict(Snapshot.objects.order_by().values_list("status").annotate(n=Count("pk")))
        gauge = GaugeMetricFamily("conveyor_snapshots", "Snapshots by status", labels=["status"])
        for value in SnapshotStatus.values:
            gauge.add_metric([value], counts.get(value, 0))
        return gauge
