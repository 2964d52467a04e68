"""Handlers run under a time limit the worker enforces: interrupted at the limit, and a
worker process whose handler will not stop replaces itself."""

from __future__ import annotations

import threading
import time

import pytest

from jobs import engine
from jobs.models import Job, JobEvent
from jobs.time_limits import HandlerTimeout, Watcher, _raise_in_thread
from jobs.worker import EngineWorker
from tests.support.base import make_job

pytestmark = pytest.mark.django_db


def run_one(worker: EngineWorker | None = None) -> str:
    worker = worker or EngineWorker(name="limits", batch_size=1)
    batch = engine.claim(worker.name, limit=1)
    return worker.run_job(batch.jobs[0], batch.token)


def test_a_handler_past_its_limit_is_interrupted_and_retried_as_a_timeout(clock):
    job = make_job("tests.overrun")
    started = time.monotonic()

    outcome = run_one()

    job.refresh_from_db()
    assert outcome == "retried"
    assert time.monotonic() - started < 5  # not the 30 s it would have taken
    assert (job.state, job.error_kind) == (Job.State.PENDING, Job.ErrorKind.TIMEOUT)
    assert job.last_error == "HandlerTimeout: ran past its time limit of 0.3 s"
    assert job.events.filter(kind=JobEvent.Kind.RETRY_SCHEDULED).exists()


def test_the_worker_goes_on_with_the_next_job_after_an_interruption(clock):
    make_job("tests.overrun", max_attempts=1)
    after = make_job("tests.noop", {"n": 2})
    worker = EngineWorker(name="limits", batch_size=1)

    assert run_one(worker) == "failed"
    assert run_one(worker) == "succeeded"
    after.refresh_from_db()
    assert after.result == {"echo": 2}


def test_a_handler_that_swallows_the_interruption_still_fails(clock):
    job = make_job("tests.overrun_swallowing")

    assert run_one() == "failed"
    job.refresh_from_db()
    assert job.error_kind == Job.ErrorKind.TIMEOUT
    assert job.result is None


def test_a_fast_handler_is_never_interrupted(clock):
    job = make_job("tests.overrun", {"for": 0.05})

    assert run_one() == "succeeded"
    job.refresh_from_db()
    assert job.result == "finished"


def test_a_handler_blocked_in_c_code_is_reported_stuck_and_fails_when_it_returns(clock, settings, tmp_path):
    settings.JOBS_STUCK_GRACE_SECONDS = 0.3
    job = make_job("tests.blocked", {"started": str(tmp_path / "started"), "for": 3})
    worker = EngineWorker(name="limits", batch_size=1)
    stuck: list[int] = []
    worker._time_limits.on_stuck = lambda limit: stuck.append(limit.job_id)

    assert run_one(worker) == "failed"

    assert stuck == [job.pk]  # reported while the sleep still held the thread
    job.refresh_from_db()
    assert job.error_kind == Job.ErrorKind.TIMEOUT


def test_an_interruption_sent_as_the_handler_returns_is_withdrawn_not_left_pending():
    watcher = Watcher(grace=10, on_stuck=lambda limit: None)

    def finishes_as_the_limit_fires() -> str:
        # The watcher's decision lands after the last line of the handler: the
        # exception is still pending when the handler returns.
        limit = watcher._current
        with limit.lock:
            limit.interrupted_at = time.monotonic()
            _raise_in_thread(threading.get_ident(), HandlerTimeout)
        return "done"

    with pytest.raises(HandlerTimeout, match="ran past its time limit of 60 s"):
        watcher.call(finishes_as_the_limit_fires, seconds=60, job_id=1)
    total = 0
    for n in range(10_000):  # calls and loops enough for a pending exception to surface
        total += abs(n)
    assert total == sum(range(10_000))
    assert watcher._current is None
