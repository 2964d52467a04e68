"""Scrape handoffs, the seed's scenarios: a new payload queues its ingestion, the same
payload again skips, a changed one queues a new handoff, a reference whose ingestion is
active waits for it, transient errors are retried up to the limit and permanent ones fail
at once. Each handoff follows its ingest run to the end through engine events."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.test import override_settings

import jobs
from ingest.runs import services as run_services
from ingest.runs.models import IngestRecord, IngestRun, IngestSource, RunStatus
from ingest.scraping import retrying, services
from ingest.scraping.hashing import payload_hash
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff, ScrapeReference
from jobs.models import Job
from tests.support.base import run_next, staff
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listings(acme) -> IngestSource:
    return builders.source(acme, name="listings", kind="scraped_reference", config={})


@pytest.fixture
def scraper(acme):
    return staff("scraper", of=acme)


def refs(*items: tuple[str, int]) -> list[dict]:
    return [
        {"external_id": external_id, "payload": {"title": external_id, "price": price}}
        for external_id, price in items
    ]


def counts(result: services.SyncResult) -> tuple[int, int, int, int]:
    h = result.handoffs
    return h.queued, h.completed, h.failed, h.skipped


def reasons(handoff: IngestionHandoff) -> list[tuple[str, str, str]]:
    return list(handoff.transitions.order_by("at", "id").values_list("from_status", "to_status", "kind"))


def test_a_new_payload_is_queued_and_followed_to_its_completed_ingest_run(clock, listings, scraper):
    result = services.sync(listings, "scrape-1", refs(("a", 10), ("b", 20)), actor=scraper)
    assert (result.received, result.created, result.changed, result.unchanged) == (2, 2, 0, 0)
    assert counts(result) == (2, 0, 0, 0)
    handoff = IngestionHandoff.objects.get(reference__external_id="a")
    assert (handoff.status, handoff.reason_code) == (HandoffStatus.QUEUED, HandoffReason.INGESTION_JOB_QUEUED)
    assert handoff.payload_hash == payload_hash({"price": 10, "title": "a"})
    assert handoff.job_id is not None and handoff.created_by == scraper

    drain(clock)
    handoff.refresh_from_db()
    assert (handoff.status, handoff.reason_code) == (
        HandoffStatus.COMPLETED,
        HandoffReason.INGESTION_COMPLETED,
    )
    run = handoff.ingest_run
    assert (run.status, run.reference.external_id, run.started_by) == (RunStatus.SUCCEEDED, "a", scraper)
    assert list(IngestRecord.objects.filter(batch__run=run).values_list("data", flat=True)) == [
        {"title": "a", "price": 10}
    ]
    assert reasons(handoff) == [
        ("", "queued", "queued_from_scrape"),
        ("queued", "queued", "ingestion_job_queued"),
        ("queued", "running", "ingestion_started"),
        ("running", "completed", "ingestion_completed"),
    ]


def test_the_same_payload_twice_queues_nothing_new(clock, listings):
    services.sync(listings, "scrape-1", refs(("a", 10), ("b", 20)))
    again = services.sync(listings, "scrape-2", refs(("b", 20), ("a", 10)))
    assert (again.created, again.changed, again.unchanged) == (0, 0, 2)
    assert counts(again) == (0, 0, 0, 2)
    assert again.handoffs.reasons == {HandoffReason.PAYLOAD_UNCHANGED: 2}
    drain(clock)
    after = services.sync(listings, "scrape-3", refs(("a", 10), ("b", 20)))
    assert counts(after) == (0, 2, 0, 0)  # ingested before
    assert IngestionHandoff.objects.count() == 2
    assert IngestRun.objects.count() == 2


def test_a_changed_payload_queues_a_new_handoff(clock, listings):
    services.sync(listings, "scrape-1", refs(("a", 10), ("b", 20)))
    drain(clock)
    changed = services.sync(listings, "scrape-2", refs(("a", 11), ("b", 20)))
    assert (changed.changed, changed.unchanged) == (1, 1)
    assert counts(changed) == (1, 1, 0, 0)
    drain(clock)
    a = ScrapeReference.objects.get(external_id="a")
    assert a.payload == {"title": "a", "price": 11}
    assert list(a.handoffs.order_by("id").values_list("status", flat=True)) == [
        HandoffStatus.COMPLETED,
        HandoffStatus.COMPLETED,
    ]
    assert a.runs.count() == 2


def test_a_reference_with_an_active_ingestion_waits_for_it_then_goes(clock, listings):
    services.sync(listings, "scrape-1", refs(("a", 10)))
    second = services.sync(listings, "scrape-2", refs(("a", 11)))
    assert counts(second) == (0, 0, 0, 1)
    assert second.handoffs.reasons == {HandoffReason.INGESTION_JOB_ALREADY_ACTIVE: 1}
    waiting = IngestionHandoff.objects.order_by("id").last()
    assert (waiting.status, waiting.job_id) == (HandoffStatus.QUEUED, None)

    third = services.sync(listings, "scrape-3", refs(("a", 12)))  # supersedes the waiting one
    assert third.handoffs.reasons == {HandoffReason.INGESTION_JOB_ALREADY_ACTIVE: 1}
    drain(clock)
    assert list(IngestionHandoff.objects.order_by("id").values_list("status", "reason_code")) == [
        (HandoffStatus.COMPLETED, HandoffReason.INGESTION_COMPLETED),
        (HandoffStatus.FAILED, HandoffReason.SUPERSEDED),
        (HandoffStatus.COMPLETED, HandoffReason.INGESTION_COMPLETED),
    ]
    latest = IngestRun.objects.filter(reference__external_id="a").order_by("id").last()
    assert IngestRecord.objects.get(batch__run=latest).data["price"] == 12


def _lock_the_job_queue(release: threading.Event, locked: threading.Event) -> None:
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("LOCK TABLE jobs_job IN SHARE ROW EXCLUSIVE MODE")
            locked.set()
            release.wait(30)
            cursor.execute("ROLLBACK")
    finally:
        other.close()


@override_settings(INGEST_HANDOFF_LOCK_TIMEOUT_MS=50)
def test_a_transient_error_is_retried_up_to_three_times_then_retry_exhausted(listings):
    release, locked = threading.Event(), threading.Event()
    holder = threading.Thread(target=_lock_the_job_queue, args=(release, locked))
    holder.start()
    waits: list[float] = []
    try:
        assert locked.wait(10)
        result = services.sync(
            listings,
            "scrape-1",
            refs(("a", 10)),
            sleep=waits.append,
            policy=retrying.RetryPolicy(max_attempts=3, base_seconds=0.5),
        )
    finally:
        release.set()
        holder.join(10)
    assert counts(result) == (0, 0, 1, 0)
    assert waits == [0.5, 1.0]  # base × 2^(attempt − 1), after attempts 1 and 2
    handoff = IngestionHandoff.objects.get()
    assert (handoff.status, handoff.reason_code, handoff.attempts) == (
        HandoffStatus.FAILED,
        HandoffReason.RETRY_EXHAUSTED,
        3,
    )
    assert "lock timeout" in handoff.last_error
    assert ScrapeReference.objects.filter(external_id="a").exists()  # the reference is kept


def test_a_permanent_error_fails_the_handoff_at_once(listings):
    IngestSource.objects.filter(pk=listings.pk).update(enabled=False)
    listings.refresh_from_db()
    waits: list[float] = []
    result = services.sync(
        listings,
        "scrape-1",
        refs(("a", 10)),
        sleep=waits.append,
        policy=retrying.RetryPolicy(max_attempts=3, base_seconds=1),
    )
    assert counts(result) == (0, 0, 1, 0) and waits == []
    handoff = IngestionHandoff.objects.get()
    assert (handoff.status, handoff.reason_code, handoff.attempts) == (
        HandoffStatus.FAILED,
        HandoffReason.QUEUE_REFUSED,
        1,
    )
    assert "disabled" in handoff.last_error


def test_an_operator_retries_a_failed_handoff_and_it_is_recorded(clock, listings, acme):
    IngestSource.objects.filter(pk=listings.pk).update(enabled=False)
    listings.refresh_from_db()
    services.sync(listings, "scrape-1", refs(("a", 10)))
    IngestSource.objects.filter(pk=listings.pk).update(enabled=True)
    operator = staff("olga", of=acme)
    assert services.retry_handoffs(IngestionHandoff.objects.all(), actor=operator) == 1
    drain(clock)
    handoff = IngestionHandoff.objects.get()
    assert handoff.status == HandoffStatus.COMPLETED
    retried = handoff.transitions.get(kind=HandoffReason.RETRIED_BY_OPERATOR)
    assert (retried.from_status, retried.actor) == (HandoffStatus.FAILED, operator)
    with pytest.raises(services.HandoffRefused, match="not failed"):
        services.retry_handoffs([handoff], actor=operator)


def test_bad_references_are_refused_by_name_and_nothing_is_written(listings):
    for items, field in [
        ("nope", "references"),
        ([{"external_id": "a"}], "references[0].payload"),
        ([{"external_id": "", "payload": {}}], "references[0].external_id"),
        ([{"external_id": "a", "payload": {}, "extra": 1}], "references[0]"),
        (
            [{"external_id": "a", "payload": {}}, {"external_id": "a", "payload": {}}],
            "references[1].external_id",
        ),
        ([{"external_id": "a", "payload": {"x": float("nan")}}], "references[0].payload"),
    ]:
        with pytest.raises(services.SyncRefused) as refused:
            services.sync(listings, "scrape-1", items)
        assert refused.value.field == field, (items, refused.value)
    with pytest.raises(services.SyncRefused) as refused:
        services.sync(listings, " ", refs(("a", 1)))
    assert refused.value.field == "scrape_run_id"
    assert not ScrapeReference.objects.exists() and not IngestionHandoff.objects.exists()


@override_settings(INGEST_SCRAPE_MAX_REFERENCES=3)
def test_more_references_than_the_limit_is_refused_naming_it(listings):
    with pytest.raises(services.SyncRefused, match="4 references in one sync; the limit is 3"):
        services.sync(listings, "scrape-1", refs(*[(str(n), n) for n in range(4)]))


def test_the_sweep_fails_a_handoff_whose_job_ended_without_starting_its_run(clock, listings):
    services.sync(listings, "scrape-1", refs(("a", 10)))
    services.sync(listings, "scrape-2", refs(("a", 11)))  # waits behind the first
    first, waiting = IngestionHandoff.objects.order_by("id")
    jobs.cancel(Job.objects.get(pk=first.job_id), reason="an operator stopped it")
    assert services.settle_stuck_handoffs() == 1
    first.refresh_from_db()
    waiting.refresh_from_db()
    assert (first.status, first.reason_code) == (HandoffStatus.FAILED, HandoffReason.INGESTION_FAILED)
    assert "ended without starting the run" in first.last_error
    assert (waiting.reason_code, waiting.job_id is not None) == (
        HandoffReason.INGESTION_JOB_QUEUED,
        True,
    )  # the next payload goes
    drain(clock)
    waiting.refresh_from_db()
    assert waiting.status == HandoffStatus.COMPLETED


def test_the_runs_reconciler_runs_the_handoff_sweep(clock, listings):
    services.sync(listings, "scrape-1", refs(("a", 10)))
    stuck = IngestionHandoff.objects.get()
    jobs.cancel(Job.objects.get(pk=stuck.job_id), reason="an operator stopped it")
    reconcile = jobs.enqueue("ingest.ReconcileRuns", {})

    assert run_next() == "succeeded"

    reconcile.refresh_from_db()
    stuck.refresh_from_db()
    assert reconcile.result == {"failed": [], "handoffs_settled": 1, "handoffs_queued": 0}
    assert (stuck.status, stuck.reason_code) == (HandoffStatus.FAILED, HandoffReason.INGESTION_FAILED)


def test_the_sweep_settles_a_running_handoff_whose_run_ended_unannounced(clock, listings):
    services.sync(listings, "scrape-1", refs(("a", 10)))
    assert run_next() == "succeeded"  # the handoff's job: it starts the run
    handoff = IngestionHandoff.objects.get()
    assert handoff.status == HandoffStatus.RUNNING
    run_services.cancel_run(handoff.ingest_run, reason="stop")
    for delivery in Job.objects.filter(type="ingest.SettleHandoff"):
        jobs.cancel(delivery, reason="lost")
    assert services.settle_stuck_handoffs() == 1
    handoff.refresh_from_db()
    assert (handoff.status, handoff.reason_code) == (HandoffStatus.FAILED, HandoffReason.INGESTION_CANCELLED)


def test_a_failed_or_cancelled_ingest_run_fails_its_handoff_through_the_event(clock, acme):
    source = builders.source(
        acme,
        name="checked",
        kind="scraped_reference",
        config={},
        hooks=[builders.exit_with(2, "bad listing")],
        max_failures=1,
    )
    services.sync(source, "scrape-1", refs(("a", 10)))
    drain(clock)
    failed = IngestionHandoff.objects.get()
    assert (failed.status, failed.reason_code) == (HandoffStatus.FAILED, HandoffReason.INGESTION_FAILED)
    assert failed.last_error.endswith("hook0 on batch 1: exit code 2: bad listing")

    services.sync(source, "scrape-2", refs(("a", 11)))
    assert run_next() == "succeeded"  # the new handoff's job starts its run
    running = IngestionHandoff.objects.get(status=HandoffStatus.RUNNING)
    run_services.cancel_run(running.ingest_run, reason="not today")
    drain(clock)
    running.refresh_from_db()
    assert (running.status, running.reason_code) == (HandoffStatus.FAILED, HandoffReason.INGESTION_CANCELLED)


def test_text_postgresql_cannot_store_is_refused_by_name(listings):
    for items, field in [
        ([{"external_id": "a\ud800", "payload": {}}], "references[0].external_id"),
        ([{"external_id": "a\x00", "payload": {}}], "references[0].external_id"),
        ([{"external_id": "a", "payload": {"t": "\ud800"}}], "references[0].payload"),
        ([{"external_id": "a", "payload": {"t\x00": 1}}], "references[0].payload"),
    ]:
        with pytest.raises(services.SyncRefused) as refused:
            services.sync(listings, "scrape-1", items)
        assert refused.value.field == field
    result = services.sync(
        listings, "scrape-1", [{"external_id": "a", "payload": {"t": "a literal \\u0000"}}]
    )
    assert result.created == 1  # the text of an escape is not a NUL


def test_the_scheduled_sweep_fails_stalled_runs_and_settles_stuck_handoffs(clock, acme, listings):
    stalled = run_services.start_ingest(builders.source(acme, batches=1))
    services.sync(listings, "scrape-1", refs(("a", 10)))
    handoff = IngestionHandoff.objects.get()
    for job in Job.objects.filter(state="pending"):
        jobs.cancel(job, reason="lost")
    clock.advance(120)
    sweep = jobs.enqueue("ingest.ReconcileRuns")
    assert run_next() == "succeeded"
    sweep.refresh_from_db()
    assert sweep.result == {"failed": [stalled.pk], "handoffs_settled": 1, "handoffs_queued": 0}
    stalled.refresh_from_db()
    handoff.refresh_from_db()
    assert (stalled.status, handoff.status) == (RunStatus.FAILED, HandoffStatus.FAILED)
