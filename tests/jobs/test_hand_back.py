"""A handler about to wait on something outside hands back the jobs claimed with it
(``ctx.hand_back_others``), so that they do not wait for it."""

from __future__ import annotations

import pytest

from jobs import clock, engine
from jobs.context import JobContext
from jobs.models import Job, JobEvent
from jobs.worker import EngineWorker, run_until_idle
from tests.support.base import make_job

pytestmark = pytest.mark.django_db(transaction=True)


def batch_of(first: str, payload: dict | None = None, *, others: int = 2) -> tuple[Job, list[int]]:
    """``first`` (claimed first, by its priority) and ``others`` quick jobs after it."""
    head = make_job(first, payload or {}, priority=10)
    return head, engine.enqueue_many("tests.noop", [{"n": n} for n in range(others)])


def test_the_jobs_claimed_with_a_waiting_handler_are_pending_again_before_it_waits():
    head, others = batch_of("tests.hand_back_and_wait")
    worker = EngineWorker(name="batcher", batch_size=3)

    assert worker.run_once() == 1  # the handler's job alone: the others are not started

    head.refresh_from_db()
    assert head.state == Job.State.SUCCEEDED
    # What the handler saw, right after its call and before its wait.
    assert head.result == {"handed_back": 2, "others": [[pk, "pending", 0, "released"] for pk in others]}
    released = JobEvent.objects.filter(job_id__in=others, kind=JobEvent.Kind.RELEASED)
    assert sorted(released.values_list("job_id", flat=True)) == others
    assert {event.worker for event in released} == {"batcher"}
    assert all(f"job {head.pk} of its batch waits" in event.message for event in released)
    assert set(Job.objects.filter(pk__in=others).values_list("state", "attempts", "lease_token")) == {
        (Job.State.PENDING, 0, None)
    }

    assert worker.run_once() == 2  # claimed anew, they run
    assert set(Job.objects.filter(pk__in=others).values_list("state", "attempts")) == {
        (Job.State.SUCCEEDED, 1)
    }


def test_an_atomic_handler_may_not_hand_back_its_batch_and_the_batch_runs_on():
    head, others = batch_of("tests.atomic_hand_back")

    assert EngineWorker(name="batcher", batch_size=3).run_once() == 3

    head.refresh_from_db()
    assert head.state == Job.State.FAILED
    assert head.last_error.startswith("RuntimeError: job ")
    assert "'tests.atomic_hand_back' is atomic" in head.last_error
    assert "atomic=False" in head.last_error
    assert not JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).exists()
    assert set(Job.objects.filter(pk__in=others).values_list("state", flat=True)) == {Job.State.SUCCEEDED}


def test_a_handler_inside_its_own_transaction_may_not_hand_back_its_batch():
    head, others = batch_of("tests.hand_back_and_wait", {"in_transaction": True})

    EngineWorker(name="batcher", batch_size=3).run_once()

    head.refresh_from_db()
    assert head.state == Job.State.PENDING  # a transient failure: retried later
    assert "it is called inside a transaction" in head.last_error
    assert not JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).exists()
    assert set(Job.objects.filter(pk__in=others).values_list("state", flat=True)) == {Job.State.SUCCEEDED}


def test_a_handler_claimed_alone_has_nothing_to_hand_back():
    head = make_job("tests.hand_back_and_wait")

    assert run_until_idle(EngineWorker(name="alone", batch_size=5)) == 1

    head.refresh_from_db()
    assert head.result == {"handed_back": 0, "others": []}
    assert not JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).exists()


def test_outside_a_worker_there_is_nothing_to_hand_back():
    job = make_job("tests.noop")
    assert JobContext(job=job, clock=clock.get_clock()).hand_back_others() == 0
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING
