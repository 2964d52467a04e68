from __future__ import annotations

import pytest

from jobs import engine, reaper
from jobs.models import Job, JobEvent
from tests.support.base import claim_one, make_job

pytestmark = pytest.mark.django_db


def test_a_job_whose_lease_expired_is_rescued_to_pending(clock):
    job = make_job("tests.noop")
    claim_one("dead-worker")
    clock.advance(7)  # default lease 6 s, no heartbeat since

    result = reaper.rescue_expired()

    job.refresh_from_db()
    assert (result.rescued, result.failed) == (1, 0)
    assert job.state == Job.State.PENDING
    assert job.rescues == 1
    assert job.lease_token is None
    assert job.run_after == clock.now()
    assert job.error_kind == Job.ErrorKind.LEASE_EXPIRED
    event = job.events.get(kind=JobEvent.Kind.RESCUED)
    assert "dead-worker" in event.message


def test_a_rescued_job_with_no_attempts_left_fails(clock):
    job = make_job("tests.noop", max_attempts=1)
    claim_one()
    clock.advance(7)

    result = reaper.rescue_expired()

    job.refresh_from_db()
    assert (result.rescued, result.failed) == (0, 1)
    assert job.state == Job.State.FAILED
    assert "attempts exhausted" in job.last_error


def test_a_heartbeat_keeps_a_live_job(clock):
    job = make_job("tests.noop")
    _, batch = claim_one()
    for _ in range(5):
        clock.advance(4)
        assert engine.heartbeat(batch.token, [job.pk]) == 1
        reaper.rescue_expired()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING


def test_a_heartbeat_with_a_stale_token_renews_nothing(clock):
    job = make_job("tests.noop")
    stale, batch = claim_one()
    clock.advance(7)
    engine.rescue(stale)
    assert engine.heartbeat(batch.token, [job.pk]) == 0


def test_the_reaper_round_takes_its_advisory_lock_and_reports(clock):
    make_job("tests.noop")
    claim_one()
    clock.advance(7)
    result = reaper.reap()
    assert result.ran
    assert result.rescued == 1
    assert result.woken_queues == 1  # the rescued job is due again: its queue is woken


FIELDS = (
    "state",
    "run_after",
    "finished_at",
    "rescues",
    "error_kind",
    "last_error",
    "locked_by",
    "lease_token",
)


def test_a_round_takes_a_batch_back_exactly_as_one_rescue_at_a_time_would(clock):
    """Pending with attempts left, failed without; rows and history rows as engine.rescue
    writes them, and a failed parent's waiting child cancelled."""

    def expired_pair() -> list[Job]:
        jobs = [make_job("tests.noop", max_attempts=2), make_job("tests.noop", max_attempts=1)]
        batch = engine.claim("dead-node", limit=10)
        engine.start(batch.jobs, batch.token)  # both started: one attempt spent each
        return jobs

    one_by_one, batched = expired_pair(), expired_pair()
    child = make_job("tests.noop", parent=batched[1])
    clock.advance(7)

    for job in one_by_one:
        engine.rescue(Job.objects.get(pk=job.pk))
    result = reaper.rescue_expired()

    assert (result.rescued, result.failed) == (1, 1)
    for alone, together in zip(one_by_one, batched, strict=True):
        alone.refresh_from_db()
        together.refresh_from_db()
        assert [getattr(together, f) for f in FIELDS] == [getattr(alone, f) for f in FIELDS]
        event = ("kind", "from_status", "to_status", "message", "attempt", "worker")
        assert together.events.filter(kind=JobEvent.Kind.RESCUED).values(*event).get() == (
            alone.events.filter(kind=JobEvent.Kind.RESCUED).values(*event).get()
        )
    assert [j.state for j in batched] == [Job.State.PENDING, Job.State.FAILED]
    child.refresh_from_db()
    assert (child.state, child.error_kind) == (Job.State.CANCELLED, Job.ErrorKind.PARENT_FAILED)


def test_a_round_takes_at_most_its_limit_oldest_lease_first(clock):
    first = [make_job("tests.noop") for _ in range(3)]
    engine.claim("early", limit=10)
    clock.advance(1)
    later = make_job("tests.noop")
    engine.claim("late", limit=10)
    clock.advance(7)

    assert {pk for pk, *_ in reaper.rescue_expired(limit=3).jobs} == {j.pk for j in first}
    assert Job.objects.get(pk=later.pk).state == Job.State.RUNNING
    assert [pk for pk, *_ in reaper.rescue_expired(limit=3).jobs] == [later.pk]
