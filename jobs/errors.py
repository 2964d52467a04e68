"""What a handler raises to say how its attempt ended (returning means success)."""

from __future__ import annotations

import re
from typing import Any

# A wake key (``Snooze(wake_on=...)``, ``jobs.wake``): short, printable ASCII without
# spaces, so that it reads the same in a log, a URL and the admin.
WAKE_KEY_LENGTH = 200
_WAKE_KEY = re.compile(rf"[!-~]{{1,{WAKE_KEY_LENGTH}}}")


class JobError(Exception):
    """Base class of the engine's own exceptions."""


class TransientError(JobError):
    """Try again later, after the handler's backoff, until max_attempts is spent."""


class PermanentError(JobError):
    """Fail now; retrying cannot help (bad input, missing configuration)."""


class Snooze(JobError):
    """Come back in ``seconds`` without spending an attempt (polling a slow system).

    ``wake_on`` names what the job waits for ("breaker:acme:api.example.com"):
    ``jobs.wake`` with that key makes it due at once, so a job waiting for a condition
    that another job changes (a probe closing a circuit breaker) runs when it changed,
    not a whole snooze later. Keys are shared by every tenant: name the tenant in the
    key when the condition is the tenant's.
    """

    def __init__(self, seconds: float, message: str = "", *, wake_on: str | None = None) -> None:
        if seconds < 0:
            raise ValueError("a snooze cannot go back in time")
        super().__init__(message or f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)
        self.wake_on = None if wake_on is None else wake_key(wake_on, "wake_on")


class UnknownJobType(JobError, ValueError):
    """Enqueue named a handler that is not registered."""


class InvalidArgument(JobError, ValueError):
    """An argument of enqueue (or publish) that the engine refuses before anything is
    written. ``argument`` names it; the message starts with that name and says what is
    wrong with the value."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


class InvalidPayload(InvalidArgument):
    """A payload that is not a JSON object the database would store unchanged."""

    def __init__(self, message: str, argument: str = "payload") -> None:
        super().__init__(argument, message)


class LeaseLost(JobError):
    """The attempt's lease token is no longer current: the job was rescued, cancelled or
    recovered meanwhile, so this worker's result must not be committed."""


class IllegalTransition(JobError):
    """An operator asked for a change the job's current state does not allow."""


def wake_key(value: Any, argument: str) -> str:
    """``value`` if it is a wake key; else ``InvalidArgument`` naming ``argument``."""
    if isinstance(value, str) and _WAKE_KEY.fullmatch(value):
        return value
    shown = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
    raise InvalidArgument(
        argument,
        f"{argument} must be 1 to {WAKE_KEY_LENGTH} printable ASCII characters without spaces, got {shown}",
    )
