"""The run pipeline end to end on the local hook runner: the events, their deliveries,
batches published once, hook failures counted up to the run's limit."""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, connection, transaction

import jobs
from ingest.runs import events, services
from ingest.runs.ingesters import Fetched
from ingest.runs.models import (
    ActionKind,
    BatchStatus,
    IngestBatch,
    IngestRecord,
    IngestRun,
    RunStatus,
)
from jobs import registry
from jobs.models import Event, Job
from jobs.testing import wait_until
from tests.support.base import staff
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_fetches_checks_and_publishes_every_batch(clock, acme):
    source = builders.source(acme, batches=3, size=2)
    run = services.start_ingest(source, actor=staff("alice", of=acme), via="api")
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert (run.batches_ingested, run.batches_published, run.records_published) == (3, 3, 6)
    assert run.finished_at is not None
    assert [b.status for b in run.batches.order_by("sequence")] == [BatchStatus.PUBLISHED] * 3
    assert [b.session_in for b in run.batches.order_by("sequence")] == [{}, {"next": 2}, {"next": 3}]
    assert IngestRecord.objects.filter(batch__run=run).count() == 6
    names = list(Event.objects.filter(pipeline_id=run.pipeline).values_list("name", flat=True))
    assert names.count("IngestRunStarted") == 1
    assert names.count("NextBatchRequested") == 3
    assert names.count("IngesterBatchReady") == 3
    assert names.count("HookBatchCompleted") == 3
    assert names.count("IngestRunFinished") == 1
    assert list(run.actions.values_list("kind", flat=True)) == [ActionKind.STARTED, ActionKind.SUCCEEDED]
    assert run.actions.first().actor.username == "alice"


def test_each_event_has_its_one_listener():
    subscribers = {
        name: [h.name for h in registry.subscribers(name)]
        for name in (
            events.NEXT_BATCH_REQUESTED,
            events.INGESTER_BATCH_READY,
            events.HOOK_BATCH_COMPLETED,
            events.INGEST_RUN_STARTED,
            events.INGEST_RUN_FINISHED,
        )
    }
    assert subscribers[events.NEXT_BATCH_REQUESTED] == ["ingest.RunIngester"]
    assert subscribers[events.INGESTER_BATCH_READY] == ["ingest.RunHooks"]
    assert subscribers[events.HOOK_BATCH_COMPLETED] == ["ingest.PublishBatch"]
    assert subscribers[events.INGEST_RUN_FINISHED] == ["ingest.SettleHandoff"]
    assert registry.get("ingest.RunIngester").subscribes == (events.NEXT_BATCH_REQUESTED,)


def test_a_failing_hook_keeps_its_exit_code_and_log_and_fails_the_run_at_its_limit(clock, acme):
    source = builders.source(acme, batches=4, hooks=[builders.exit_with(3, "bad row 7")], max_failures=2)
    run = services.start_ingest(source)
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.hook_failures == 2
    # The hook's own last word is the cause, on the run and on the job alike.
    assert run.failure_reason.startswith("2 hook failures reached the run's limit of 2; the last: ")
    assert run.failure_reason.endswith(": exit code 3: bad row 7")
    deliveries = Job.objects.filter(pipeline_id=run.pipeline, type="ingest.RunHooks", state="failed")
    assert {job.last_error for job in deliveries} == {
        "PermanentError: hook hook0 failed with exit code 3: bad row 7"
    }
    failed = run.batches.filter(status=BatchStatus.HOOKS_FAILED).first()
    execution = failed.hook_executions.get()
    assert execution.exit_code == 3
    assert "bad row 7" in execution.log_tail
    assert IngestRecord.objects.filter(batch__run=run).count() == 0
    # What was still queued when the run failed is cancelled, and says why.
    cancelled = Job.objects.filter(pipeline_id=run.pipeline, state="cancelled")
    assert cancelled.exists()
    assert not Job.objects.filter(pipeline_id=run.pipeline, state__in=["pending", "running"]).exists()


def test_a_hook_that_cannot_start_is_a_failure_at_once(clock, acme):
    source = builders.source(acme, batches=1, hooks=[["/nonexistent/hook"]], max_failures=1)
    run = services.start_ingest(source)
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    execution = run.batches.get().hook_executions.get()
    assert "cannot run" in execution.reason
    delivery = Job.objects.get(pipeline_id=run.pipeline, type="ingest.RunHooks")
    assert (delivery.state, delivery.attempts) == ("failed", 1)


def test_a_source_runs_once_at_a_time(acme):
    source = builders.source(acme)
    first = services.start_ingest(source)
    with pytest.raises(services.RunRefused) as refused:
        services.start_ingest(source)
    assert refused.value.run == first


def test_cancel_stops_the_run_and_its_queued_work(clock, acme):
    source = builders.source(acme, batches=5)
    run = services.start_ingest(source)
    user = staff("olga", operator=True)
    services.cancel_run(run, actor=user, via="admin")
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.batches.count() == 0
    action = run.actions.get(kind=ActionKind.CANCELLED)
    assert (action.actor, action.via) == (user, "admin")
    assert Job.objects.get(pipeline_id=run.pipeline, type="ingest.StopHooks").state == "succeeded"


def test_retry_failed_hooks_reopens_the_run_and_publishes(clock, acme):
    source = builders.source(acme, batches=2, hooks=[builders.exit_with(1)], max_failures=5)
    run = services.start_ingest(source)
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "2 of 2 batches failed their hooks" in run.failure_reason
    builders.run_instead(source, builders.PASS)
    assert services.retry_failed_hooks(run, via="admin") == 2
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.records_published == 4


def test_a_source_that_fails_fails_the_run_and_a_retry_goes_on_from_that_batch(clock, acme):
    source = builders.source(acme, config={"batches": 3, "size": 1, "fail_at": 2})
    run = services.start_ingest(source)
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "fetching batch 2 failed: the source refused batch 2" in run.failure_reason
    # Batch 1's hooks and publication, queued when the run failed, were cancelled with it.
    assert run.batches_published == 0
    source.config = {"batches": 3, "size": 1}
    source.save()
    assert services.retry_from_failed_batch(run) == 2
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert [b.session_in for b in run.batches.order_by("sequence")] == [{}, {"next": 2}, {"next": 3}]
    assert run.records_published == 3


def test_a_transient_source_error_is_retried_with_backoff(clock, acme):
    source = builders.source(acme, config={"batches": 2, "size": 1, "fail_at": 2, "transient": True})
    run = services.start_ingest(source)
    jobs.run_until_idle()
    waiting = Job.objects.get(pipeline_id=run.pipeline, type="ingest.RunIngester", state="pending")
    assert waiting.attempts == 1
    assert (waiting.run_after - clock.now()).total_seconds() >= 9


def test_a_stalled_run_is_failed_by_the_sweep(clock, acme):
    source = builders.source(acme, batches=1)
    run = services.start_ingest(source)
    for job in Job.objects.filter(pipeline_id=run.pipeline, state="pending"):
        jobs.cancel(job, reason="lost")
    clock.advance(120)
    assert services.fail_stalled_runs() == [run.pk]
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.failure_reason.startswith("stalled")


def test_the_records_appear_only_with_their_batch(clock, acme):
    source = builders.source(acme, batches=1, size=3)
    run = services.start_ingest(source)
    jobs.run_until_idle()
    run = IngestRun.objects.get(pk=run.pk)
    assert run.status == RunStatus.SUCCEEDED
    batch = run.batches.get()
    assert list(IngestRecord.objects.filter(batch=batch).values_list("position", flat=True)) == [0, 1, 2]


def test_two_attempts_recording_the_same_batch_at_once_write_it_once(acme):
    """Two attempts of one request racing past the handler's check: the second waits for
    the first's row lock on the run, then writes nothing, or fails on the batch's unique
    constraint (which the handler takes as "fetched already")."""
    run = services.start_ingest(builders.source(acme, batches=2))
    fetched = Fetched([{"id": 1}], {"next": 2}, True)
    first_wrote, release, outcomes = threading.Event(), threading.Event(), {}

    def record(name: str) -> None:
        try:
            with transaction.atomic():
                outcomes[name] = services.record_batch(
                    run, sequence=1, fetched=fetched, session_in={}, staged_id=name, fetch_ms=1
                )
                if name == "first":
                    first_wrote.set()
                    release.wait(10)
        except IntegrityError as exc:
            outcomes[name] = exc
        finally:
            connection.close()

    first = threading.Thread(target=record, args=("first",))
    first.start()
    assert first_wrote.wait(10)
    second = threading.Thread(target=record, args=("second",))
    second.start()
    _wait_until_a_backend_waits_for_a_lock()
    release.set()
    first.join(10), second.join(10)

    assert isinstance(outcomes["first"], IngestBatch)
    late = outcomes["second"]
    assert late is None or services.is_duplicate_batch(late), late
    run.refresh_from_db()
    assert run.batches_ingested == 1
    assert list(run.batches.values_list("location", flat=True)) == ["first"]
    assert Event.objects.filter(pipeline_id=run.pipeline, name="IngesterBatchReady").count() == 1


def _wait_until_a_backend_waits_for_a_lock() -> None:
    def waiting() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            return cursor.fetchone()[0]

    wait_until(waiting, 10, "the second attempt waiting for the first's lock")


def test_an_integrity_error_of_another_constraint_is_no_duplicate_batch(acme):
    source = builders.source(acme)
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        builders.source(acme, name=source.name)
    assert not services.is_duplicate_batch(refused.value)


def test_a_batch_larger_than_a_chunk_is_published_whole_in_order_with_its_keys(clock, acme, monkeypatch):
    monkeypatch.setattr(services, "PUBLISH_CHUNK", 2)
    source = builders.source(acme, batches=1, size=5, config={"batches": 1, "size": 5, "key_field": "id"})
    run = services.start_ingest(source)
    drain(clock)
    run.refresh_from_db()
    assert (run.status, run.records_published) == (RunStatus.SUCCEEDED, 5)
    records = list(
        IngestRecord.objects.filter(batch__run=run)
        .order_by("position")
        .values_list("position", "key", "data")
    )
    assert records == [(n, f"1-{n}", {"id": f"1-{n}", "batch": 1}) for n in range(5)]


@pytest.mark.parametrize(
    ("reason", "exit_code", "log_tail", "expected"),
    [
        (
            "Error",
            3,
            "reading\nrecord 17: price is negative\n\n",
            "exit code 3: record 17: price is negative",
        ),
        ("OOMKilled", 137, "", "exit code 137 (OOMKilled)"),
        ("DeadlineExceeded", None, "still going", "DeadlineExceeded: still going"),
        ("", None, "  \n", "failed"),
        ("Error", 1, "x" * 400, "exit code 1: " + "x" * 299 + "…"),
    ],
)
def test_a_hook_failure_reads_as_its_exit_code_and_its_last_line(reason, exit_code, log_tail, expected):
    assert services.hook_failure_text(reason, exit_code, log_tail) == expected
