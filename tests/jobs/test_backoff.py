"""Backoff policies, checked as properties over many attempts and jitters."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.backoff import WORKER_STEP_BACKOFF, Exponential, FailureStreak, Fibonacci, Fixed, Schedule

attempts = st.integers(min_value=1, max_value=500)


def test_exponential_doubles_from_60s_and_caps_at_5_minutes():
    policy = Exponential(base=60, factor=2, cap=300)
    assert [policy.delay(n).total_seconds() for n in range(1, 7)] == [60, 120, 240, 300, 300, 300]


def test_fibonacci_polls_follow_the_table_then_stay_at_90s():
    policy = Fibonacci()
    assert [policy.delay(n).total_seconds() for n in range(1, 13)] == [
        2, 3, 5, 8, 13, 21, 34, 55, 89, 90, 90, 90]


def test_a_schedule_reuses_its_last_delay():
    policy = Schedule(delays=(1, 10, 100))
    assert [policy.delay(n).total_seconds() for n in range(1, 6)] == [1, 10, 100, 100, 100]


@given(attempt=attempts, base=st.floats(0.1, 1000), factor=st.floats(1, 10), cap=st.floats(1, 10_000))
def test_exponential_never_shrinks_and_never_passes_its_cap(attempt, base, factor, cap):
    policy = Exponential(base=base, factor=factor, cap=cap)
    now, after = policy.delay(attempt), policy.delay(attempt + 1)
    assert now <= after
    assert after.total_seconds() <= cap + 1e-6  # timedelta keeps microseconds


@given(attempt=attempts, jitter=st.floats(0, 1), seed=st.integers())
def test_jitter_stays_within_its_bounds_and_the_cap(attempt, jitter, seed):
    plain = Exponential(base=60, cap=300)
    jittered = Exponential(base=60, cap=300, jitter=jitter)
    base = plain.delay(attempt).total_seconds()
    value = jittered.delay(attempt, random.Random(seed)).total_seconds()
    assert base * (1 - jitter) - 1e-6 <= value <= min(base * (1 + jitter), 300) + 1e-6


@given(attempt=attempts, seconds=st.floats(0, 3600), jitter=st.floats(0, 1), seed=st.integers())
def test_fixed_with_jitter_stays_around_its_value(attempt, seconds, jitter, seed):
    value = Fixed(seconds=seconds, jitter=jitter).delay(attempt, random.Random(seed)).total_seconds()
    assert seconds * (1 - jitter) - 1e-6 <= value <= seconds * (1 + jitter) + 1e-6


@given(table=st.lists(st.integers(0, 1000).map(float), min_size=1, max_size=20), attempt=attempts)
def test_table_policies_only_return_table_values(table, attempt):
    assert Fibonacci(table=tuple(table)).delay(attempt).total_seconds() in table
    assert Schedule(delays=tuple(table)).delay(attempt).total_seconds() in table


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_jitter_outside_0_to_1_is_refused(bad):
    with pytest.raises(ValueError):
        Exponential(jitter=bad)


def test_attempts_are_counted_from_one():
    with pytest.raises(ValueError):
        Fixed().delay(0)


def test_a_failing_step_waits_longer_after_each_failure_up_to_the_cap_and_starts_over_after_a_success():
    streak = FailureStreak(Exponential(base=0.1, factor=2, cap=1.0))
    assert [round(streak.failed(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    streak.succeeded()
    assert streak.failed() == 0.1


@given(failures=st.integers(1, 200))
def test_a_worker_step_is_tried_again_within_the_cap_and_soon_at_first(failures):
    streak = FailureStreak()
    delays = [streak.failed() for _ in range(failures)]
    assert all(0 < delay <= WORKER_STEP_BACKOFF.cap for delay in delays)
    assert delays[0] <= WORKER_STEP_BACKOFF.base * (1 + WORKER_STEP_BACKOFF.jitter)
