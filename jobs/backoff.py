"""Retry delays as values: each policy says how long to wait after the n-th failed attempt.

Policies are frozen dataclasses so that a handler declares its policy once, tests can
compare them, and the admin can print them. ``jitter`` spreads retries of many jobs
that failed together (a busy cluster) so that they do not come back in one wave: the
delay is multiplied by a factor drawn uniformly from [1 - jitter, 1 + jitter], and
never exceeds the policy's cap.

Parameters are checked when a policy is made, so that a handler declaring a negative,
NaN or absurd delay fails at import rather than scheduling retries in the past (or
past the year 9999) later. A delay of zero means "retry at once" and is allowed where a
policy lists delays (``Fixed``, ``Schedule``, ``Fibonacci``); an ``Exponential`` needs a
positive base, or it never backs off.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import timedelta

# Longer than any sensible wait between attempts, and short enough that now + the delay
# always stays a valid datetime.
MAX_DELAY_SECONDS = 366 * 24 * 3600.0


def _seconds(name: str, value: object, *, positive: bool = False) -> None:
    """Refuse a delay that is not a finite number of seconds from 0 (or above 0, if
    ``positive``) to ``MAX_DELAY_SECONDS``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name}={value!r}: a delay is a number of seconds")
    if math.isnan(value) or value < 0 or (positive and value == 0):
        least = "more than 0" if positive else "at least 0"
        raise ValueError(f"{name}={value!r}: a delay must be {least} seconds")
    if value > MAX_DELAY_SECONDS:
        raise ValueError(
            f"{name}={value!r}: a delay must be at most {MAX_DELAY_SECONDS:.0f} seconds (366 days)"
        )


def _delays(name: str, values: tuple[float, ...]) -> None:
    if not values:
        raise ValueError(f"{name}=(): needs at least one delay")
    for i, value in enumerate(values):
        _seconds(f"{name}[{i}]", value)


@dataclass(frozen=True)
class Backoff(ABC):
    # Keyword-only: ``Fixed(5)`` is five seconds, not a jitter of 5.
    jitter: float = field(default=0.0, kw_only=True)

    def __post_init__(self) -> None:
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, int | float)
            or not (0.0 <= self.jitter <= 1.0)
        ):
            raise ValueError(f"jitter={self.jitter!r}: must be a fraction from 0 to 1")

    @abstractmethod
    def base_seconds(self, attempt: int) -> float:
        """The un-jittered wait after failed attempt number ``attempt``."""

    def cap_seconds(self) -> float | None:
        return None

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """The wait after failed attempt number ``attempt`` (1 for the first)."""
        if attempt < 1:
            raise ValueError("attempts are counted from 1")
        seconds = self.base_seconds(attempt)
        if self.jitter:
            seconds *= (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        cap = self.cap_seconds()
        if cap is not None:
            seconds = min(seconds, cap)
        return timedelta(seconds=max(seconds, 0.0))


@dataclass(frozen=True)
class Exponential(Backoff):
    """``base * factor ** (attempt - 1)``, capped: 60 s × 2^n up to 5 min by default."""

    base: float = 60.0
    factor: float = 2.0
    cap: float = 300.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _seconds("base", self.base, positive=True)
        _seconds("cap", self.cap, positive=True)
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, int | float)
            or not (1 <= self.factor <= 1000)
        ):
            raise ValueError(f"factor={self.factor!r}: must be a number from 1 to 1000 (delays never shrink)")
        if self.cap < self.base:
            raise ValueError(f"cap={self.cap!r}: must be at least base ({self.base!r})")

    def base_seconds(self, attempt: int) -> float:
        # min() before the power would overflow for absurd attempt counts.
        exponent = min(attempt - 1, 64)
        return min(self.base * self.factor**exponent, self.cap)

    def cap_seconds(self) -> float:
        return self.cap


FIBONACCI_POLL_SECONDS = (2, 3, 5, 8, 13, 21, 34, 55, 89, 90)


@dataclass(frozen=True)
class Fibonacci(Backoff):
    """A table walked one step per attempt, its last entry repeated (2, 3, 5 … 89, 90 s)."""

    table: tuple[float, ...] = field(default=FIBONACCI_POLL_SECONDS)

    def __post_init__(self) -> None:
        super().__post_init__()
        _delays("table", self.table)

    def base_seconds(self, attempt: int) -> float:
        return self.table[min(attempt, len(self.table)) - 1]

    def cap_seconds(self) -> float:
        return max(self.table)


@dataclass(frozen=True)
class Fixed(Backoff):
    """The same wait after every attempt."""

    seconds: float = 30.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _seconds("seconds", self.seconds)

    def base_seconds(self, attempt: int) -> float:
        return self.seconds


@dataclass(frozen=True)
class Schedule(Backoff):
    """An explicit list of waits; attempts past its end reuse the last one."""

    delays: tuple[float, ...] = (10.0, 60.0, 300.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        _delays("delays", self.delays)

    def base_seconds(self, attempt: int) -> float:
        return self.delays[min(attempt, len(self.delays)) - 1]

    def cap_seconds(self) -> float:
        return max(self.delays)


DEFAULT_BACKOFF = Exponential()


# How a worker tries its own steps again (registering, LISTEN, claiming, heartbeating)
# after a database fault: soon at first, since a restart or a failover is short, then
# at most every few seconds, spread so that a fleet of workers does not reconnect in one
# wave.
WORKER_STEP_BACKOFF = Exponential(base=0.1, factor=2.0, cap=5.0, jitter=0.5)


@dataclass
class FailureStreak:
    """The consecutive failures of a step that is tried again and again (a worker's
    claim, its heartbeat, its LISTEN), and how long to wait before the next try."""

    policy: Backoff = WORKER_STEP_BACKOFF
    failures: int = 0

    def failed(self) -> float:
        """Count a failure; the seconds to wait before trying again."""
        self.failures += 1
        return self.policy.delay(self.failures).total_seconds()

    def succeeded(self) -> None:
        self.failures = 0
