from __future__ import annotations

from datetime import timedelta

import pytest

from jobs import engine
from jobs.errors import LeaseLost
from jobs.models import Job, JobEvent
from tests.support.base import claim_one, hit_count, make_job, run_next

pytestmark = pytest.mark.django_db


def test_a_returning_handler_succeeds_with_its_result(clock):
    job = make_job("tests.noop", {"n": 7})

    assert run_next() == "succeeded"

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert job.result == {"echo": 7}
    assert job.attempts == 1
    assert job.lease_token is None
    assert job.finished_at == clock.now()
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds == [JobEvent.Kind.CLAIMED, JobEvent.Kind.SUCCEEDED]


def test_a_transient_error_retries_after_the_handlers_backoff(clock):
    job = make_job("tests.flaky", {"succeed_on": 3})

    assert run_next() == "retried"
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.run_after == clock.now() + timedelta(seconds=60)
    assert "flaky attempt 1" in job.last_error

    clock.advance(59)
    assert engine.claim("w", limit=1).jobs == []
    clock.advance(1)
    assert run_next() == "retried"
    job.refresh_from_db()
    assert job.run_after == clock.now() + timedelta(seconds=120)

    clock.advance(120)
    assert run_next() == "succeeded"
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.SUCCEEDED, 3)


def test_it_fails_for_good_when_attempts_are_spent(clock):
    job = make_job("tests.crash")
    assert run_next() == "retried"
    clock.advance(10)
    assert run_next() == "failed"

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert job.attempts == job.max_attempts == 2
    assert job.error_kind == Job.ErrorKind.TRANSIENT
    assert "RuntimeError: unexpected" in job.last_error


def test_a_permanent_error_fails_at_once(clock):
    job = make_job("tests.permanent")
    assert run_next() == "failed"
    job.refresh_from_db()
    assert (job.state, job.attempts, job.error_kind) == (Job.State.FAILED, 1, "permanent")
    assert "bad input in row 3" in job.last_error


def test_snooze_comes_back_later_without_spending_an_attempt(clock):
    ready_at = clock.now() + timedelta(seconds=12)
    job = make_job("tests.poll", {"ready_at": ready_at.isoformat(), "every": 5})

    for _ in range(3):
        assert run_next() == "snoozed"
        job.refresh_from_db()
        assert (job.state, job.attempts) == (Job.State.PENDING, 0)
        assert job.run_after == clock.now() + timedelta(seconds=5)
        clock.advance(5)

    assert run_next() == "succeeded"
    job.refresh_from_db()
    assert job.attempts == 1  # three snoozes and a success: one attempt spent


def test_a_failing_handlers_writes_are_rolled_back(clock, hits_table):
    make_job("tests.write_then_fail")
    assert run_next() == "failed"
    assert hit_count() == 0


def test_children_are_chained_in_the_parents_pipeline(clock):
    parent = make_job("tests.parent", {"children": 3})
    assert run_next() == "succeeded"

    children = Job.objects.filter(parent=parent)
    assert children.count() == 3
    assert set(children.values_list("pipeline_id", flat=True)) == {parent.pipeline_id}
    assert set(children.values_list("state", flat=True)) == {Job.State.PENDING}


def test_a_late_result_of_a_fenced_attempt_is_refused(clock, hits_table):
    job = make_job("tests.record")
    stale, batch = claim_one()
    clock.advance(60)
    assert engine.rescue(stale) == Job.State.PENDING  # the worker was presumed dead

    with pytest.raises(LeaseLost):
        engine.complete(stale, batch.token, result="late")

    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.result is None


def test_a_fenced_atomic_handlers_writes_roll_back(clock, hits_table):
    from jobs.worker import EngineWorker

    make_job("tests.record")
    stale, batch = claim_one()  # started: its attempt counted
    clock.advance(60)
    engine.rescue(stale)
    zombie = EngineWorker(name="zombie")
    zombie._started = {stale.pk}  # it had started the handler before it froze

    outcome = zombie.run_job(stale, batch.token)

    assert outcome == "refused"
    assert hit_count() == 0
    assert stale.events.filter(kind=JobEvent.Kind.LEASE_LOST).exists()


def test_a_non_json_result_fails_permanently(clock):
    import jobs

    @jobs.handler("tests.bad_result", max_attempts=3)
    def bad_result(ctx):
        return object()

    try:
        job = make_job("tests.bad_result")
        assert run_next() == "failed"
        job.refresh_from_db()
        assert job.error_kind == "permanent"
        assert "not JSON" in job.last_error
    finally:
        from jobs import registry

        registry.unregister("tests.bad_result")


def test_a_job_taken_away_before_its_handler_starts_does_not_run(clock, hits_table):
    from jobs.worker import EngineWorker

    make_job("tests.record")
    stale, batch = claim_one(start=False)
    clock.advance(60)
    engine.rescue(stale)

    outcome = EngineWorker(name="zombie").run_job(stale, batch.token)

    assert outcome == "lost"
    assert hit_count() == 0
    stale.refresh_from_db()
    assert (stale.state, stale.attempts) == (Job.State.PENDING, 0)
