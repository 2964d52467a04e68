from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection

from jobs import engine, reaper
from jobs.models import Job, JobEvent
from tests.base import make_job, row_locked

pytestmark = pytest.mark.django_db


def test_a_claim_marks_jobs_running_with_a_lease_and_spends_no_attempt(clock):
    job = make_job("tests.noop")

    batch = engine.claim("host:1", limit=10)

    job.refresh_from_db()
    assert [j.pk for j in batch.jobs] == [job.pk]
    assert job.state == Job.State.RUNNING
    assert job.attempts == 0  # spent when the handler starts
    assert job.events.get().attempt == 1  # the attempt the claim is for
    assert job.locked_by == "host:1"
    assert job.lease_token == batch.token
    assert job.lease_expires_at == clock.now() + __import__("datetime").timedelta(seconds=6)
    assert job.started_at == clock.now()
    assert job.events.get().kind == JobEvent.Kind.CLAIMED


def test_higher_priority_jobs_are_claimed_first():
    low = make_job("tests.noop")
    high = make_job("tests.noop", priority=5)
    batch = engine.claim("w", limit=1)
    assert batch.jobs[0].pk == high.pk
    assert engine.claim("w", limit=1).jobs[0].pk == low.pk


def test_a_claim_takes_at_most_its_limit():
    engine.enqueue_many("tests.noop", [{}] * 30)
    assert len(engine.claim("w", limit=12).jobs) == 12
    assert Job.objects.filter(state=Job.State.PENDING).count() == 18


def test_a_queue_filter_claims_only_served_queues():
    make_job("tests.noop", queue="bulk")
    make_job("tests.noop", queue="default")
    batch = engine.claim("w", limit=10, queues=["bulk"])
    assert [j.queue for j in batch.jobs] == ["bulk"]


def test_jobs_of_unregistered_types_are_left_alone():
    make_job("tests.noop")
    Job.objects.update(type="retired.handler")
    assert engine.claim("w", limit=10).jobs == []


def test_a_child_waits_for_its_parent_to_succeed(clock):
    parent = make_job("tests.noop")
    child = make_job("tests.noop", parent=parent)

    assert [j.pk for j in engine.claim("w", limit=10).jobs] == [parent.pk]
    Job.objects.filter(pk=parent.pk).update(state=Job.State.SUCCEEDED, finished_at=clock.now(),
                                            lease_token=None)
    assert [j.pk for j in engine.claim("w", limit=10).jobs] == [child.pk]


def test_two_jobs_with_one_concurrency_key_never_run_together(clock):
    first = make_job("tests.keyed", concurrency_key="module:7:travel:2026")
    second = make_job("tests.keyed", concurrency_key="module:7:travel:2026")

    batch = engine.claim("w", limit=10)
    assert [j.pk for j in batch.jobs] == [first.pk]
    assert engine.claim("w", limit=10).jobs == []  # key held by the running job

    engine.complete(batch.jobs[0], batch.token)
    batch = engine.claim("w", limit=10)
    assert [j.pk for j in batch.jobs] == [second.pk]
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.is_current, second.is_current) == (False, True)


@pytest.mark.django_db(transaction=True)
def test_skip_locked_passes_over_rows_another_transaction_holds():
    held = make_job("tests.noop")
    free = make_job("tests.noop")
    with row_locked(held):
        batch = engine.claim("w", limit=10)
        assert [j.pk for j in batch.jobs] == [free.pk]
    assert [j.pk for j in engine.claim("w", limit=10).jobs] == [held.pk]


@pytest.mark.django_db(transaction=True)
def test_the_unique_index_decides_between_two_claimers_of_one_key():
    """Both claimers see the key free; the partial unique index lets only one commit."""
    make_job("tests.keyed", concurrency_key="k")
    make_job("tests.keyed", concurrency_key="k")
    barrier = threading.Barrier(2)
    won: list[int] = []

    def claimer(name: str) -> None:
        try:
            barrier.wait(5)
            won.extend(j.pk for j in engine.claim(name, limit=1).jobs)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert Job.objects.filter(state=Job.State.RUNNING).count() == 1


def test_starting_a_handler_counts_its_attempt_once_and_only_under_the_lease(clock):
    first, second = make_job("tests.noop"), make_job("tests.noop")
    batch = engine.claim("host:1", limit=10)
    engine.cancel(second)

    started = engine.start(batch.jobs, batch.token)

    assert started == {first.pk}
    assert dict(Job.objects.values_list("pk", "attempts")) == {first.pk: 1, second.pk: 0}
    assert engine.start(batch.jobs, uuid.uuid4()) == set()  # another lease counts nothing


def test_a_claimed_batch_whose_worker_died_goes_back_with_nothing_spent(clock):
    """A worker took 20 single-attempt jobs, started the first and died: the other 19
    never ran and come back pending; only the started one is spent (and fails)."""
    ids = engine.enqueue_many("tests.noop", [{}] * 20, max_attempts=1)
    batch = engine.claim("doomed", limit=20)
    engine.start(batch.jobs[:1], batch.token)
    clock.advance(60)

    reaper.rescue_expired()

    states = dict(Job.objects.values_list("pk", "state"))
    spent = batch.jobs[0].pk
    assert states.pop(spent) == Job.State.FAILED
    assert set(states.values()) == {Job.State.PENDING}
    assert set(Job.objects.exclude(pk=spent).values_list("attempts", flat=True)) == {0}
    assert len(ids) == 20
