"""Retrying the queueing of ingestions in a sync: transient errors only, a few times.

Transient: timeouts, lost or refused connections, a lock that could not be had in time,
serialization failures and deadlocks, and a server that says "rate limited" (429) or
"unavailable" (503). Anything else is permanent and is not retried. Between attempts
the policy waits ``base × 2^(attempt − 1)`` seconds; the default base is 0, so a sync
call does not wait at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import DatabaseError

T = TypeVar("T")

# SQLSTATEs worth another try: connection exceptions (class 08), serialization failure,
# deadlock, lock not available (lock_timeout), query cancelled (statement_timeout), too
# many connections, cannot connect now.
TRANSIENT_SQLSTATES = ("40001", "40P01", "55P03", "57014", "53300", "57P03")
TRANSIENT_HTTP_STATUSES = (429, 503)


def is_transient(error: BaseException) -> bool:
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    if getattr(error, "status_code", None) in TRANSIENT_HTTP_STATUSES:
        return True
    if isinstance(error, DatabaseError):
        cause = error.__cause__
        state = getattr(cause, "sqlstate", None) or ""
        return state.startswith("08") or state in TRANSIENT_SQLSTATES
    return False


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_seconds < 0:
            raise ValueError("base_seconds must not be negative")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        return self.base_seconds * 2 ** (attempt - 1)


@dataclass(frozen=True)
class Outcome:
    attempts: int
    error: BaseException | None = None  # None: it succeeded
    value: Any = None

    @property
    def exhausted(self) -> bool:
        """Failed on a transient error at every attempt."""
        return self.error is not None and is_transient(self.error)


def attempt(
    call: Callable[[int], T], policy: RetryPolicy, *, sleep: Callable[[float], None] = time.sleep
) -> Outcome:
    """Call ``call`` (with the attempt's number, from 1) until it succeeds, fails
    permanently, or ``policy`` runs out."""
    for number in range(1, policy.max_attempts + 1):
        try:
            return Outcome(number, value=call(number))
        except Exception as error:
            if not is_transient(error) or number == policy.max_attempts:
                return Outcome(number, error=error)
            wait = policy.delay(number)
            if wait > 0:
                sleep(wait)
    raise AssertionError("unreachable: the last attempt returns")
