from __future__ import annotations

import pytest

from jobs import engine
from jobs.errors import IllegalTransition, LeaseLost
from jobs.models import Job, JobEvent
from tests.support.base import claim_one, make_job, run_next, staff

pytestmark = pytest.mark.django_db


def test_recover_puts_a_stuck_running_job_back_and_fences_its_worker(clock):
    alice = staff("alice")
    job = make_job("tests.noop")
    stuck, batch = claim_one()

    engine.recover(job, actor=alice)

    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    event = job.events.get(kind=JobEvent.Kind.RECOVERED)
    assert event.actor == alice
    with pytest.raises(LeaseLost):
        engine.complete(stuck, batch.token)


def test_recover_grants_another_attempt_when_all_were_spent(clock):
    job = make_job("tests.noop", max_attempts=1)
    claim_one()
    engine.recover(job)
    job.refresh_from_db()
    assert job.max_attempts == 2
    assert run_next() == "succeeded"


def test_retry_runs_a_failed_job_again_from_scratch(clock):
    bob = staff("bob")
    job = make_job("tests.permanent")
    run_next()

    engine.retry(job, actor=bob, reason="input fixed")

    job.refresh_from_db()
    assert (job.state, job.attempts, job.last_error, job.finished_at) == (Job.State.PENDING, 0, "", None)
    event = job.events.get(kind=JobEvent.Kind.RETRIED)
    assert (event.actor, event.message, event.from_status) == (bob, "input fixed", "failed")


def test_cancel_cascades_to_jobs_waiting_on_it(clock):
    parent = make_job("tests.noop")
    child = make_job("tests.noop", parent=parent)
    grandchild = make_job("tests.noop", parent=child)

    engine.cancel(parent)

    for job in (parent, child, grandchild):
        job.refresh_from_db()
        assert job.state == Job.State.CANCELLED
    assert child.error_kind == Job.ErrorKind.PARENT_FAILED


def test_run_now_makes_a_waiting_job_due(clock):
    job = make_job("tests.flaky")
    run_next()  # retry scheduled 60 s out
    engine.run_now(job)
    job.refresh_from_db()
    assert job.run_after == clock.now()


@pytest.mark.parametrize(
    ("action", "state"),
    [("recover", "succeeded"), ("retry", "pending"), ("run_now", "running"), ("cancel", "succeeded")],
)
def test_an_illegal_action_is_refused_and_changes_nothing(clock, action, state):
    job = make_job("tests.noop")
    if state == "running":
        claim_one()
    if state == "succeeded":
        run_next()
    job.refresh_from_db()
    before = (job.state, job.run_after, job.attempts)

    with pytest.raises(IllegalTransition, match=f"job {job.pk} is {state}"):
        getattr(engine, action)(job)

    job.refresh_from_db()
    assert (job.state, job.run_after, job.attempts) == before
    assert not job.events.filter(kind__in=["recovered", "retried", "run_now", "cancelled"]).exists()


def test_recover_makes_a_pending_job_nobody_picked_up_due_now(clock):
    job = make_job("tests.noop", run_after=clock.now() + __import__("datetime").timedelta(hours=2))
    engine.recover(job)
    job.refresh_from_db()
    assert (job.state, job.run_after) == (Job.State.PENDING, clock.now())
