"""The exports on /metrics: claims lost without word from their worker, jobs and
snapshots by status, polls, and the completed jobs' durations, read from the tables at
each scrape."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from exports import metrics, reconcile, services
from exports.models import JobStatus, SnapshotStatus
from jobs import reaper
from tests.support.base import staff, tenant
from tests.support.exports.builders import claim_jobs, complete, mapping, polled_jobs, report

pytestmark = pytest.mark.django_db


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    body = Client().get("/metrics").content.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def no_engine():
    raise RuntimeError("no engine in this test")


def poll(clock, job, wait: int):
    """The job's next poll, ``wait`` seconds on: it finds the query still running."""
    clock.advance(wait)
    [due] = polled_jobs("w1", 1)
    assert due.pk == job.pk
    return report(due, JobStatus.SUBMITTED, next_uri="http://t/v1/statement/q-1/2")


@pytest.fixture
def history(clock):
    """Two snapshots created at T0, their six jobs taken to: completed after 3 s, 100 s and
    900 s; submitted and polled twice; failed; lost to the reaper and reset by the
    reconciliation (pending)."""
    acme = tenant("Acme")
    services.create_snapshot(mapping("first", of=acme))
    services.create_snapshot(mapping("second", of=acme))
    a0, a1, a2, b0, b1, b2 = claim_jobs("w1", 10)
    clock.advance(3)
    complete(a0)
    clock.advance(97)
    complete(a1)
    a2 = report(a2, JobStatus.SUBMITTED, query_id="q-1")
    report(b0, JobStatus.FAILED, error="no")
    services.reset_claim(b1, staff("olga", operator=True))  # an operator's: not counted
    poll(clock, poll(clock, a2, 2), 3)  # next poll at T0+110
    # b2 was never heard of after its claim: the reaper takes its lease back, and the
    # reconciliation its claim.
    assert reaper.rescue_expired().rescued == 1
    assert reconcile.reconcile(engine=no_engine).claims_reset == 1
    again = claim_jobs("w2", 1)
    assert [job.pk for job in again] == [b1.pk]
    clock.advance(795)
    complete(again[0])


def test_the_claims_lost_without_word_from_their_worker_are_counted(settings, history):
    settings.METRICS_PUBLIC = True

    assert scrape()[("stale_export_claims_reset_total", ())] == 1


def test_a_lost_claim_the_next_claim_took_over_before_the_reconciliation_is_counted_too(settings, clock):
    settings.METRICS_PUBLIC = True
    services.create_snapshot(mapping("first", of=tenant("Acme")))
    [lost] = claim_jobs("w1", 1)
    clock.advance(services.LEASE_SECONDS + 1)
    assert reaper.rescue_expired().rescued == 1
    [again] = claim_jobs("w2", 1)
    assert (again.pk, again.generation) == (lost.pk, 2)
    assert reconcile.reconcile(engine=no_engine).claims_reset == 0  # nothing left for it

    assert scrape()[("stale_export_claims_reset_total", ())] == 1


def test_jobs_and_snapshots_are_counted_by_status(settings, history):
    settings.METRICS_PUBLIC = True

    found = scrape()

    jobs = {status: found[("conveyor_export_jobs", (("status", status),))] for status in JobStatus.values}
    assert jobs == {"pending": 1, "claimed": 0, "submitted": 1, "completed": 3, "failed": 1}
    # Pending, claimed and submitted: what the export workers' autoscaler scales on.
    assert found[("conveyor_export_jobs_unfinished", ())] == 2
    snapshots = {
        status: found[("conveyor_snapshots", (("status", status),))] for status in SnapshotStatus.values
    }
    assert snapshots == {"pending": 0, "creating": 2, "ready": 0, "failed": 0}
    assert found[("conveyor_export_polls_total", ())] == 2


def test_the_completed_jobs_durations_are_a_histogram(settings, history):
    settings.METRICS_PUBLIC = True

    found = scrape()

    buckets = {
        le: found[("conveyor_export_duration_seconds_bucket", (("le", le),))]
        for le in ("1.0", "5.0", "15.0", "60.0", "300.0", "900.0", "3600.0", "10800.0", "+Inf")
    }
    assert buckets == {
        "1.0": 0,
        "5.0": 1,
        "15.0": 1,
        "60.0": 1,
        "300.0": 2,
        "900.0": 3,
        "3600.0": 3,
        "10800.0": 3,
        "+Inf": 3,
    }
    assert found[("conveyor_export_duration_seconds_count", ())] == 3
    assert found[("conveyor_export_duration_seconds_sum", ())] == 1003


def test_the_histogram_is_one_query(history, django_assert_num_queries):
    with django_assert_num_queries(1):
        buckets, seconds = metrics.duration_histogram()

    assert buckets[-1] == ("+Inf", 3.0) and seconds == 1003


def test_with_no_exports_every_figure_is_zero(settings):
    settings.METRICS_PUBLIC = True

    found = scrape()

    assert found[("stale_export_claims_reset_total", ())] == 0
    assert found[("conveyor_export_jobs", (("status", "pending"),))] == 0
    assert found[("conveyor_export_jobs_unfinished", ())] == 0
    assert found[("conveyor_export_polls_total", ())] == 0
    assert found[("conveyor_export_duration_seconds_count", ())] == 0
    assert found[("conveyor_export_duration_seconds_sum", ())] == 0
