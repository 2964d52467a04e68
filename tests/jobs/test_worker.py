"""The worker loop in a thread of this process, against committed data."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from jobs import engine
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from jobs.worker import EngineWorker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running_worker(settings) -> Iterator[EngineWorker]:
    settings.JOBS_POLL_SECONDS = 30  # a job picked up quickly was woken by NOTIFY
    worker = EngineWorker(name="thread-worker")
    # Set each time the loop found nothing due and waits (for a NOTIFY or the poll).
    worker.idle = threading.Event()  # type: ignore[attr-defined]
    idle_wait = worker._idle_wait

    def observed_idle_wait() -> None:
        worker.idle.set()  # type: ignore[attr-defined]
        idle_wait()

    worker._idle_wait = observed_idle_wait  # type: ignore[method-assign]

    def run() -> None:
        try:
            worker.run()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert wait_until(lambda: Worker.objects.filter(name="thread-worker").exists())
    yield worker
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()


def state_of(job: Job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def test_notify_wakes_an_idle_worker_at_once(running_worker):
    assert running_worker.idle.wait(10)  # in its LISTEN wait, with a 30 s poll
    started = time.monotonic()
    job = engine.enqueue("tests.noop", {"n": 1})
    assert wait_until(lambda: state_of(job) == Job.State.SUCCEEDED, timeout=5)
    assert time.monotonic() - started < 5


def test_progress_is_throttled_but_the_final_value_is_exact(running_worker):
    job = engine.enqueue("tests.progress", {"steps": 200_000})
    assert wait_until(lambda: state_of(job) == Job.State.SUCCEEDED, timeout=90)
    job.refresh_from_db()
    assert (job.progress_done, job.progress_total) == (200_000, 200_000)
    steps = JobEvent.objects.filter(job=job, kind=JobEvent.Kind.PROGRESS).count()
    assert steps < 200  # a handful of flushes, not 200,000 rows


def test_the_claim_is_the_last_round_trip_before_the_first_handler():
    job = engine.enqueue("tests.noop", {})
    worker = EngineWorker(name="one-trip", batch_size=1)
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(" ".join(str(sql).split()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert worker.run_once() == 1

    assert [s for s in statements if "attempts = attempts + 1" in s] == []
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.SUCCEEDED, 1)
    assert list(job.events.order_by("id").values_list("kind", "attempt")) == [
        (JobEvent.Kind.CLAIMED, 1),
        (JobEvent.Kind.SUCCEEDED, 1),
    ]


def test_a_stopping_worker_hands_back_jobs_it_has_not_started(settings):
    engine.enqueue_many("tests.noop", [{}] * 5)
    worker = EngineWorker(name="stopper", batch_size=5)
    worker.stopping.set()  # asked to stop right after its claim
    assert worker.run_once() == 0
    assert Job.objects.filter(state=Job.State.PENDING, attempts=0).count() == 5
    assert JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).count() == 5


def test_a_draining_worker_claims_nothing_and_waits_for_its_stop(settings, tmp_path):
    """The drain file (a pod's preStop hook) stops the claims; the loop goes on, so that
    its cluster process does not take it for an engine that died."""
    settings.JOBS_POLL_SECONDS = 0.1
    settings.JOBS_DRAIN_FILE = str(tmp_path / "drain")
    (tmp_path / "drain").touch()
    job = engine.enqueue("tests.noop", {})
    worker = EngineWorker(name="drainer")
    thread = threading.Thread(target=lambda: (worker.run(), connection.close()))
    thread.start()
    try:
        # The loop asks about the file before every claim: once it has seen it, it never
        # claims, so the job stays pending however long the worker goes on.
        assert wait_until(lambda: worker._drain_logged)
        assert Worker.objects.filter(name="drainer").exists()
        assert thread.is_alive() and state_of(job) == Job.State.PENDING
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive() and worker.jobs_done == 0


def test_a_worker_that_finds_the_drain_file_mid_batch_hands_back_the_rest(settings, tmp_path):
    settings.JOBS_DRAIN_FILE = str(tmp_path / "drain")
    engine.enqueue_many("tests.noop", [{}] * 5)
    worker = EngineWorker(name="drained", batch_size=5)
    (tmp_path / "drain").touch()
    # run_once claims regardless (the loop asks first); the batch then sees the file.
    assert worker.run_once() == 0
    assert Job.objects.filter(state=Job.State.PENDING, attempts=0).count() == 5
    assert JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).count() == 5
    # With exit_when_idle a draining worker ends as when nothing is due.
    worker.run(exit_when_idle=True)
    assert Job.objects.filter(state=Job.State.PENDING).count() == 5
