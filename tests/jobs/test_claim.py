from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection, transaction

from jobs import engine, reaper, sql
from jobs.models import Job, JobEvent
from tests.support.base import make_job, row_locked

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
    Job.objects.filter(pk=parent.pk).update(
        state=Job.State.SUCCEEDED, finished_at=clock.now(), lease_token=None
    )
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


def test_a_claim_that_starts_its_first_job_counts_that_attempt_alone(clock):
    low, high, other = make_job("tests.noop"), make_job("tests.noop", priority=5), make_job("tests.noop")

    batch = engine.claim("host:1", limit=10, start_first=True)

    assert batch.started == high.pk
    assert [job.pk for job in batch.jobs] == [high.pk, low.pk, other.pk]
    assert [job.attempts for job in batch.jobs] == [1, 0, 0]
    assert dict(Job.objects.values_list("pk", "attempts")) == {high.pk: 1, low.pk: 0, other.pk: 0}
    # Every claimed row is numbered with the attempt it is for, counted or not.
    assert set(JobEvent.objects.values_list("attempt", flat=True)) == {1}
    assert engine.start(batch.jobs[1:], batch.token) == {low.pk, other.pk}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}


def test_the_job_a_claim_starts_has_no_concurrency_key_and_comes_first(clock):
    keyed = make_job("tests.noop", concurrency_key="k", priority=9)
    plain = make_job("tests.noop")

    batch = engine.claim("w", limit=10, start_first=True)

    assert (batch.started, [job.pk for job in batch.jobs]) == (plain.pk, [plain.pk, keyed.pk])
    assert Job.objects.get(pk=keyed.pk).attempts == 0
    Job.objects.filter(pk=plain.pk).delete()
    make_job("tests.noop", concurrency_key="k2")
    assert engine.claim("w", limit=10, start_first=True).started is None  # only keyed ones


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


def test_a_claim_takes_the_head_of_each_key_not_a_batch_of_one_key(clock):
    """Ten jobs of each of four keys, enqueued key after key: a batch holds one job per
    key, so a backlog of one key never fills it."""
    for key in ("a", "b", "c", "d"):
        engine.enqueue_many("tests.keyed", [{}] * 10, concurrency_key=key)

    claimed = engine.claim("w1", limit=10).jobs

    assert sorted(job.concurrency_key for job in claimed) == ["a", "b", "c", "d"]
    heads = {key: Job.objects.filter(concurrency_key=key).order_by("id").first().pk for key in "abcd"}
    assert sorted(job.pk for job in claimed) == sorted(heads.values())


def test_a_second_claimer_gets_the_other_keys_while_one_is_held(clock):
    for key in ("a", "b", "c"):
        engine.enqueue_many("tests.keyed", [{}] * 10, concurrency_key=key)
    assert [job.concurrency_key for job in engine.claim("w1", limit=1).jobs] == ["a"]

    second = engine.claim("w2", limit=10).jobs

    assert sorted(job.concurrency_key for job in second) == ["b", "c"]


def test_jobs_of_a_key_run_in_the_order_they_came_whatever_their_priority(clock):
    first = make_job("tests.keyed", concurrency_key="k")
    make_job("tests.keyed", concurrency_key="k", priority=10)

    assert [job.pk for job in engine.claim("w1", limit=10).jobs] == [first.pk]


def test_a_waiting_head_does_not_block_its_key_when_it_is_not_due(clock):
    from datetime import timedelta

    later = make_job("tests.keyed", concurrency_key="k", run_after=clock.now() + timedelta(hours=1))
    due = make_job("tests.keyed", concurrency_key="k")

    assert [job.pk for job in engine.claim("w1", limit=10).jobs] == [due.pk]
    assert later.pk < due.pk


def test_claimable_and_the_claim_statement_agree(clock):
    """The keyed claim re-checks with JobQuerySet.claimable(): both must pick the same."""
    from jobs import registry

    for key in ("a", "b"):
        engine.enqueue_many("tests.keyed", [{}] * 3, concurrency_key=key)
    make_job("tests.noop")
    expected = set(Job.objects.claimable(clock.now(), registry.names(), []).values_list("pk", flat=True))

    claimed = {job.pk for job in engine.claim("w1", limit=50).jobs}

    assert claimed == expected


def test_the_unique_index_refuses_a_second_current_job_of_a_key(clock):
    """The last line behind the claim's checks: were two claimers ever to hold different
    jobs of one key, the second hand-over trips jobs_job_one_current_per_key and loses."""
    first = make_job("tests.keyed", concurrency_key="k")
    second = make_job("tests.keyed", concurrency_key="k")
    engine.claim("w1", limit=1)
    picked = [(second.pk, "tests.keyed", "k", second.key_scope)]

    won = engine._claim_keyed(second.pk, "k", second.key_scope, picked, uuid.uuid4(), "w2", clock.now())

    assert won is False
    assert list(Job.objects.filter(is_current=True).values_list("pk", flat=True)) == [first.pk]
    assert Job.objects.get(pk=second.pk).state == Job.State.PENDING


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_claim_of_its_own_commits_without_waiting_for_the_disk_and_only_itself():
    """Its own transaction only: a claim inside a caller's transaction must not relax the
    caller's commit, and nothing after the claim's commit is relaxed."""
    engine.enqueue_many("tests.noop", [{}, {}])

    with transaction.atomic():
        assert len(engine.claim("w", limit=1).jobs) == 1
        assert _synchronous_commit() == "on"
    with transaction.atomic():  # as the worker's claim runs, on its own
        statement = sql.claim(named_queues=False, fair=True, relaxed=True)
        params = engine.claim_params("w", limit=5)
        assert len(sql.execute(statement, params).fetchall()) == 1
        assert _synchronous_commit() == "off"
    assert _synchronous_commit() == "on"
    assert len(engine.claim("w", limit=5).jobs) == 0  # the relaxed claim took the other
