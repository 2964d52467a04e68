"""One job waiting to start per pending key: a partial unique index decides, so requests
for the same work coalesce until a worker starts it, under concurrency too."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from jobs import engine
from jobs.context import JobContext
from jobs.errors import IllegalTransition, InvalidArgument
from jobs.models import Job
from jobs.testing import wait_until
from tests.support.base import claim_one, make_job, tenant

pytestmark = pytest.mark.django_db

State = Job.State


def once(key: str = "rebuild:7", **options) -> engine.Enqueued:
    return engine.enqueue_once("tests.noop", {}, pending_key=key, **options)


def test_a_second_request_gets_the_job_waiting_to_start_and_writes_nothing():
    first, again = once(), once()

    assert first.created and not again.created
    assert again.job.pk == first.job.pk
    assert Job.objects.count() == 1


def test_a_started_job_frees_its_key_so_a_request_meanwhile_queues_exactly_one_more(clock):
    running = once().job
    claim_one()

    more, again = once(), once()

    assert more.created and more.job.pk != running.pk
    assert not again.created and again.job.pk == more.job.pk
    assert Job.objects.filter(state=State.PENDING).count() == 1


def test_enqueue_with_a_pending_key_returns_the_holder_as_enqueue_once_does():
    first = make_job(pending_key="k")
    assert make_job(pending_key="k").pk == first.pk


def test_pending_keys_are_per_tenant():
    acme, globex = tenant("Acme"), tenant("Globex")
    jobs = {once(tenant=acme).job.pk, once(tenant=globex).job.pk, once().job.pk}
    assert len(jobs) == 3
    assert once(tenant=globex).job.pk in jobs and not once(tenant=globex).created


def test_a_finished_or_cancelled_job_no_longer_holds_its_key(clock):
    first = once().job
    engine.cancel(first)
    assert once().created


# Each way a claimed job returns to pending.
MOVES = {
    "retry": lambda job, token, clock: engine.fail(job, token, "flaky"),
    "snooze": lambda job, token, clock: engine.snooze(job, token, 30),
    "release": lambda job, token, clock: engine.release([job], token),
    "rescue": lambda job, token, clock: (clock.advance(3600), engine.rescue(Job.objects.get(pk=job.pk))),
    "recover": lambda job, token, clock: engine.recover(job),
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_started_job_back_in_pending_never_collides_with_the_one_queued_behind_it(move, clock):
    started = once().job
    job, batch = claim_one()
    behind = once().job

    MOVES[move](job, batch.token, clock)

    assert Job.objects.filter(pk__in=[started.pk, behind.pk], state=State.PENDING).count() == 2
    assert once().job.pk == behind.pk


@pytest.mark.parametrize("key", ["pending_key", "unique_key"])
def test_retrying_a_job_whose_key_was_taken_meanwhile_is_refused_naming_the_holder(key, clock):
    first = make_job(**{key: "k"})
    engine.cancel(first)
    holder = make_job(**{key: "k"})

    with pytest.raises(IllegalTransition, match=f"job {holder.pk} holds its {key[:-4]} key 'k'"):
        engine.retry(first)

    first.refresh_from_db()
    assert first.state == State.CANCELLED


def test_enqueue_once_says_whether_a_unique_key_was_free():
    assert engine.enqueue_once("tests.noop", {}, unique_key="u").created
    assert not engine.enqueue_once("tests.noop", {}, unique_key="u").created


def test_enqueue_once_needs_a_key():
    with pytest.raises(InvalidArgument, match="pending_key or unique_key is needed"):
        engine.enqueue_once("tests.noop", {})


def test_enqueue_many_skips_payloads_whose_pending_key_is_held():
    held = once("k1").job
    ids = engine.enqueue_many("tests.noop", [{}, {}, {}], pending_keys=["k1", "k2", None])
    assert len(ids) == 2 and held.pk not in ids


def test_a_chained_child_may_coalesce_by_pending_key(clock):
    waiting = once("next").job
    parent = make_job()
    ctx = JobContext(job=parent, clock=clock)
    ctx.chain("tests.noop", {}, pending_key="rebuild:7")
    ctx.chain("tests.noop", {}, pending_key="next")
    engine.enqueue_children(parent, ctx.children)
    assert Job.objects.filter(pending_key="next").get().pk == waiting.pk
    assert Job.objects.filter(pending_key="rebuild:7").count() == 1


# --- under concurrency -------------------------------------------------------------------------


def lock_waiters() -> int:
    """Backends of this database waiting for a lock (another transaction's insert)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE NOT l.granted AND a.datname = current_database()"
        )
        return cursor.fetchone()[0]


def in_threads(
    count: int, call: Callable[[], Any]
) -> tuple[list[threading.Thread], list[Any], list[BaseException]]:
    """Start ``count`` threads, each running ``call`` in a transaction of its own."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            with transaction.atomic():
                results[n] = call()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    return threads, results, errors


@pytest.mark.django_db(transaction=True)
def test_callers_racing_on_one_key_create_exactly_one_job():
    gate = threading.Barrier(8)

    def request() -> engine.Enqueued:
        gate.wait(10)
        return once()

    threads, results, errors = in_threads(8, request)
    for thread in threads:
        thread.join(30)

    assert not errors
    assert sum(r.created for r in results) == 1
    assert {r.job.pk for r in results} == set(Job.objects.values_list("pk", flat=True))
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_caller_that_cannot_see_an_uncommitted_holder_still_does_not_insert():
    """The index, not a lookup, decides: callers that started while the first insert was
    uncommitted (so no lookup could have found it) wait for it, then get its job."""
    inserted, commit = threading.Event(), threading.Event()

    def first() -> engine.Enqueued:
        result = once()
        inserted.set()
        commit.wait(30)
        return result

    holder, held, held_errors = in_threads(1, first)
    assert inserted.wait(10)
    callers, results, errors = in_threads(4, once)
    try:
        wait_until(lambda: lock_waiters() >= 4, 10, "the callers to wait for the first insert")
        assert not Job.objects.exists()  # still uncommitted: nothing a lookup could find
    finally:
        commit.set()
        for thread in holder + callers:
            thread.join(30)

    assert not held_errors and not errors
    assert held[0].created and not any(r.created for r in results)
    assert {r.job.pk for r in results} == {held[0].job.pk}
    assert Job.objects.count() == 1


def test_the_index_refuses_a_second_waiting_job_however_it_is_written():
    first = once().job
    with pytest.raises(IntegrityError, match="jobs_job_one_pending_per_key"), transaction.atomic():
        Job.objects.create(
            type="tests.noop",
            pending_key=first.pending_key,
            run_after=first.run_after,
            created_at=first.created_at,
        )
