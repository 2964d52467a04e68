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
        2,
        3,
        5,
        8,
        13,
        21,
        34,
        55,
        89,
        90,
        90,
        90,
    ]


def test_a_schedule_reuses_its_last_delay():
    policy = Schedule(delays=(1, 10, 100))
    assert [policy.delay(n).total_seconds() for n in range(1, 6)] == [1, 10, 100, 100, 100]


@given(attempt=attempts, base=st.floats(0.1, 1000), factor=st.floats(1, 10), above_base=st.floats(0, 10_000))
def test_exponential_never_shrinks_and_never_passes_its_cap(attempt, base, factor, above_base):
    cap = base + above_base
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


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.1"])
def test_jitter_outside_0_to_1_is_refused(bad):
    with pytest.raises(ValueError, match="jitter="):
        Exponential(jitter=bad)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: Fixed(-5), "seconds=-5: a delay must be at least 0 seconds"),
        (lambda: Fixed(float("nan")), "seconds=nan"),
        (lambda: Fixed(float("inf")), "seconds=inf: a delay must be at most 31622400 seconds"),
        (lambda: Fixed("30"), "seconds='30': a delay is a number of seconds"),
        (lambda: Exponential(base=-60), "base=-60: a delay must be more than 0 seconds"),
        (lambda: Exponential(base=0), "base=0: a delay must be more than 0 seconds"),
        (lambda: Exponential(base=60, cap=30), "cap=30: must be at least base (60)"),
        (lambda: Exponential(factor=0.5), "factor=0.5: must be a number from 1 to 1000"),
        (lambda: Exponential(factor=-2), "factor=-2"),
        (lambda: Exponential(cap=float("nan")), "cap=nan"),
        (lambda: Schedule(delays=(10, -1)), "delays[1]=-1: a delay must be at least 0 seconds"),
        (lambda: Schedule(delays=()), "delays=(): needs at least one delay"),
        (lambda: Fibonacci(table=(1, float("nan"))), "table[1]=nan"),
    ],
)
def test_a_policy_refuses_parameters_that_are_no_delay_naming_the_parameter(make, words):
    with pytest.raises(ValueError) as refused:
        make()
    assert words in str(refused.value)


def test_zero_is_a_delay_a_listed_policy_may_ask_for():
    assert Fixed(0).delay(3).total_seconds() == 0
    assert Schedule(delays=(0, 10)).delay(1).total_seconds() == 0


def test_a_positional_value_is_the_policys_own_parameter_not_the_jitter():
    assert Fixed(5) == Fixed(seconds=5, jitter=0)
    assert Exponential(10, 3, 600).delay(2).total_seconds() == 30


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
