"""How a hook runner or a source says an attempt went wrong.

A runner's failures are the infrastructure's, not the hook's: a hook that ran and exited
non-zero is a hook failure (its exit code and log tail are kept), while these say the
hook could not be run at all. They are sorted so that the pipeline backs off when the
cluster is busy and stops when retrying cannot help.
"""

from __future__ import annotations


class InfrastructureError(Exception):
    """The system a hook or a source runs on failed, not the hook or the data."""


class TransientResourceError(InfrastructureError):
    """Retry later, with backoff: the cluster is busy or briefly unreachable (a Pod left
    unscheduled past its deadline, an eviction, resource pressure, a Job or Pod that
    vanished, an API answer of 429 or 5xx, a connection error).

    ``try_ended`` says whether the try is over on the runner (removed, vanished, never
    started), so that the next attempt launches a new one. False when the runner cannot
    tell, because its API did not answer: the try may still be out, and the next attempt
    looks at it again (or launches the same name, adopting it) instead of starting a
    second beside it."""

    def __init__(self, message: str, *, try_ended: bool = True) -> None:
        super().__init__(message)
        self.try_ended = try_ended


class PermanentRunnerError(InfrastructureError):
    """Do not retry: the hook cannot run as configured (its image cannot be pulled or
    is invalid, its container cannot be configured, the API refused the Job as invalid
    or forbidden)."""


class SourceError(Exception):
    """A source could not give its next batch. ``transient`` errors (timeouts, 5xx, 429,
    unreachable hosts) are retried with backoff; the others fail the run's ingester."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient
