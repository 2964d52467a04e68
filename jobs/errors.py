"""What a handler raises to say how its attempt ended (returning means success)."""

from __future__ import annotations


class JobError(Exception):
    """Base class of the engine's own exceptions."""


class TransientError(JobError):
    """Try again later, after the handler's backoff, until max_attempts is spent."""


class PermanentError(JobError):
    """Fail now; retrying cannot help (bad input, missing configuration)."""


class Snooze(JobError):
    """Come back in ``seconds`` without spending an attempt (polling a slow system)."""

    def __init__(self, seconds: float, message: str = "") -> None:
        if seconds < 0:
            raise ValueError("a snooze cannot go back in time")
        super().__init__(message or f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)


class UnknownJobType(JobError, ValueError):
    """Enqueue named a handler that is not registered."""


class InvalidPayload(JobError, ValueError):
    """A payload that cannot be stored as JSON (or is not a JSON object)."""


class LeaseLost(JobError):
    """The attempt's lease token is no longer current: the job was rescued, cancelled or
    recovered meanwhile, so this worker's result must not be committed."""


class IllegalTransition(JobError):
    """An operator asked for a change the job's current state does not allow."""
