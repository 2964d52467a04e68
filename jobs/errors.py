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
