"""The lease rule: a worker trusts its leases only while its heartbeat renews them."""

from __future__ import annotations

import threading
import uuid

import pytest

from jobs import engine
from jobs.leases import LeaseWatch
from jobs.models import Job, JobEvent
from jobs.worker import EngineWorker
from tests.support.base import make_job


class Monotonic:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tick() -> Monotonic:
    return Monotonic()


def test_a_batch_is_in_doubt_once_half_its_lease_passes_without_a_renewal(tick):
    watch, token = LeaseWatch(tick), uuid.uuid4()
    watch.claimed(token, tick.now, lease_seconds=6)
    tick.now += 3
    assert not watch.batch_in_doubt()
    tick.now += 0.1
    assert watch.batch_in_doubt()


def test_a_heartbeat_for_the_batch_renews_it_and_one_sent_for_another_does_not(tick):
    watch, token = LeaseWatch(tick), uuid.uuid4()
    watch.claimed(token, tick.now, lease_seconds=6)
    tick.now += 2
    watch.renewed(uuid.uuid4(), tick.now)  # sent for the batch before this one
    watch.renewed(None, tick.now)  # sent while the worker held nothing
    tick.now += 2
    assert watch.batch_in_doubt()
    watch.renewed(token, tick.now - 0.5)  # sent half a second ago, for this batch
    assert not watch.batch_in_doubt()


def test_nothing_is_in_doubt_once_the_batch_is_done(tick):
    watch = LeaseWatch(tick)
    watch.claimed(uuid.uuid4(), tick.now, lease_seconds=6)
    watch.finished()
    tick.now += 60
    assert not watch.batch_in_doubt()


def test_the_heartbeat_is_in_doubt_until_a_beat_succeeds_and_again_half_a_lease_after(tick):
    watch = LeaseWatch(tick)
    assert watch.heartbeat_in_doubt(6)
    watch.renewed(None, tick.now)
    tick.now += 3
    assert not watch.heartbeat_in_doubt(6)
    tick.now += 0.1
    assert watch.heartbeat_in_doubt(6)


def test_a_successful_beat_wakes_the_worker_waiting_for_it():
    watch, woke = LeaseWatch(), threading.Event()

    def wait() -> None:
        watch.wait_for_heartbeat(10)
        woke.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    watch.renewed(None, 0.0)
    waiter.join(5)
    assert woke.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_worker_hands_back_the_rest_of_a_batch_whose_leases_are_in_doubt(tick):
    jobs = [make_job("tests.noop") for _ in range(4)]
    worker = EngineWorker(name="doubtful", batch_size=4)
    worker.leases = LeaseWatch(tick)
    real_run_job = worker.run_job

    def run_job_while_the_heartbeat_fails(job, token, **options):
        tick.now += 3.5  # no renewal comes while the first job runs
        return real_run_job(job, token, **options)

    worker.run_job = run_job_while_the_heartbeat_fails

    assert worker.run_once() == 1
    assert Job.objects.filter(state=Job.State.SUCCEEDED).count() == 1
    handed_back = Job.objects.filter(pk__in=[j.pk for j in jobs], state=Job.State.PENDING)
    assert handed_back.count() == 3
    assert JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_heartbeat_renews_its_batch_runs_all_of_it(tick):
    make_job("tests.noop")
    make_job("tests.noop")
    worker = EngineWorker(name="renewed", batch_size=2)
    worker.leases = LeaseWatch(tick)
    real_run_job = worker.run_job

    def run_job_while_the_heartbeat_renews(job, token, **options):
        tick.now += 3.5
        worker.leases.renewed(token, tick.now)
        return real_run_job(job, token, **options)

    worker.run_job = run_job_while_the_heartbeat_renews

    assert worker.run_once() == 2
    assert not Job.objects.exclude(state=Job.State.SUCCEEDED).exists()


@pytest.mark.django_db(transaction=True)
def test_jobs_a_failed_hand_back_left_behind_go_back_with_the_next_claim():
    jobs = [make_job("tests.noop") for _ in range(3)]
    worker = EngineWorker(name="retrier", batch_size=3)
    batch = engine.claim(worker.name, limit=3)
    worker._unstarted = (batch.token, batch.jobs[1:], set())  # a release the database refused

    worker.run_once()

    assert JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).count() == 2
    assert Job.objects.get(pk=jobs[0].pk).state == Job.State.RUNNING  # its fate: the reaper's
