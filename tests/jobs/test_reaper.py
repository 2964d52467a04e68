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
