"""The job lifecycle as a state machine: random sequences of worker, reaper and operator
moves must keep the engine's invariants (hypothesis stateful testing, real PostgreSQL)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jobs import engine
from jobs.clock import ManualClock, use_clock
from jobs.errors import IllegalTransition, LeaseLost
from jobs.models import Job, JobEvent
from jobs.testing import T0

State = Job.State


class JobLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Job.objects.all().delete()
        self.clock = ManualClock(T0)
        self._clock_ctx = use_clock(self.clock)
        self._clock_ctx.__enter__()
        self.job = engine.enqueue("tests.flaky", {}, max_attempts=3)
        self.token: uuid.UUID | None = None
        self.started = False  # the current claim's handler started (its attempt counted)
        self.attempts_at_claim = 0
        self.stale_tokens: list[uuid.UUID] = []
        self.events = 0

    def teardown(self) -> None:
        self._clock_ctx.__exit__(None, None, None)

    def _reload(self) -> Job:
        self.job.refresh_from_db()
        return self.job

    def _running(self) -> bool:
        return self._reload().state == State.RUNNING

    @rule(seconds=st.sampled_from([1, 7, 61, 400]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    def _lose_token(self) -> None:
        if self.token:
            self.stale_tokens.append(self.token)
        self.token, self.started = None, False

    @rule()
    def claim(self) -> None:
        attempts = self._reload().attempts
        batch = engine.claim("w", limit=1)
        if batch.jobs:
            self._lose_token()
            self.token, self.attempts_at_claim = batch.token, attempts
            job = self._reload()
            assert job.state == State.RUNNING
            assert job.attempts == attempts  # a claim spends nothing

    @precondition(lambda self: self.token is not None and not self.started)
    @rule()
    def handler_starts(self) -> None:
        job = self._reload()
        if engine.start([job], self.token):
            self.started = True
            assert self._reload().attempts == self.attempts_at_claim + 1

    @precondition(lambda self: self.token is not None and not self.started)
    @rule()
    def worker_hands_back_unstarted(self) -> None:
        engine.release([self._reload()], self.token)
        job = self._reload()
        if job.state == State.PENDING:
            assert job.attempts == self.attempts_at_claim
        self._lose_token()

    @precondition(lambda self: self.token is not None and self.started)
    @rule(
        outcome=st.sampled_from(["complete", "transient", "permanent", "snooze"]),
        wake_on=st.sampled_from([None, "breaker", "other"]),
    )
    def worker_reports(self, outcome: str, wake_on: str | None) -> None:
        before = self._reload()
        attempts = before.attempts
        try:
            if outcome == "complete":
                engine.complete(before, self.token)
            elif outcome == "snooze":
                engine.snooze(before, self.token, 30, wake_on=wake_on)
                after = self._reload()
                assert after.attempts == attempts - 1  # a snooze gives it back
                assert after.wake_key == wake_on  # no earlier key survives
            else:
                engine.fail(before, self.token, "boom", permanent=outcome == "permanent")
        except LeaseLost:
            assert (before.state, before.lease_token) != (State.RUNNING, self.token)
        self._lose_token()

    @precondition(lambda self: bool(self.stale_tokens))
    @rule(outcome=st.sampled_from(["complete", "transient", "snooze"]))
    def a_zombie_reports_late(self, outcome: str) -> None:
        before = self._reload()
        snapshot = (before.state, before.attempts, before.run_after, before.result)
        stale = self.stale_tokens[-1]
        with pytest.raises(LeaseLost):
            if outcome == "complete":
                engine.complete(before, stale, result="late")
            elif outcome == "snooze":
                engine.snooze(before, stale, 30)
            else:
                engine.fail(before, stale, "late")
        after = self._reload()
        assert (after.state, after.attempts, after.run_after, after.result) == snapshot

    @rule()
    def breaker_closes(self) -> None:
        """``wake`` makes the job due only while it sleeps on the key."""
        before = self._reload()
        asleep = (
            before.state == State.PENDING
            and before.wake_key == "breaker"
            and before.run_after > self.clock.now()
        )
        assert engine.wake("breaker") == int(asleep)
        after = self._reload()
        if asleep:
            assert (after.run_after, after.wake_key) == (self.clock.now(), None)
            assert after.events.last().kind == JobEvent.Kind.WOKEN
        else:
            assert (after.state, after.run_after, after.wake_key) == (
                before.state,
                before.run_after,
                before.wake_key,
            )

    @rule()
    def reaper_runs(self) -> None:
        from jobs import reaper

        unstarted = self.token is not None and not self.started
        reaper.rescue_expired()
        if not self._running() and self.token:
            if unstarted and self.job.state == State.PENDING:
                assert self.job.attempts == self.attempts_at_claim  # given back whole
            self._lose_token()

    @rule(action=st.sampled_from(["recover", "retry", "cancel", "run_now"]))
    def operator_acts(self, action: str) -> None:
        try:
            getattr(engine, action)(self._reload())
        except IllegalTransition:
            return
        if self.token and not self._running():
            self._lose_token()

    @invariant()
    def the_row_is_consistent(self) -> None:
        job = self._reload()
        assert job.attempts <= job.max_attempts
        assert (job.state == State.RUNNING) == (job.lease_token is not None)
        assert (job.state in Job.FINISHED) == (job.finished_at is not None)
        if job.state == State.RUNNING:
            assert job.lease_token == self.token
        if job.wake_key is not None:  # only while asleep since a keyed snooze
            assert job.state == State.PENDING
            assert job.events.last().kind == JobEvent.Kind.SNOOZED

    @invariant()
    def history_only_grows(self) -> None:
        count = JobEvent.objects.filter(job=self.job).count()
        assert count >= self.events
        self.events = count


@pytest.mark.django_db
def test_the_job_lifecycle_keeps_its_invariants():
    run_state_machine_as_test(
        JobLifecycle, settings=settings(max_examples=40, stateful_step_count=25, deadline=None)
    )
