"""When a worker may trust its leases.

A worker holds its claimed jobs on leases that only its heartbeat renews. A heartbeat
that cannot reach the database (connections exhausted, a restart, a network split)
renews nothing, and once a lease ends, a reaper in any process takes the job back: the
worker's result is then refused by the fence and its attempt was spent for nothing. A
worker that went on claiming and starting jobs in that state would lose them one after
the other. So each worker keeps the time of its last renewal and follows one rule:

    A lease is *in doubt* once more than half of it has passed since the worker last
    renewed it (a claim counts as a renewal of the leases it stamps). While its batch's
    leases are in doubt, the worker starts no further job of that batch: it hands the
    rest back, or leaves them to the reaper if it cannot reach the database. While its
    heartbeat is in doubt (no beat succeeded for half the default lease, or none yet),
    it claims nothing, until a heartbeat succeeds again. A handler already running goes
    on: should its lease end meanwhile, the fence refuses its result.

The other half of the lease is the margin for the job that is running when the heartbeat
stops, and for the hand-back. Times here are monotonic seconds (``time.monotonic``),
taken before the statement that renews: the database stamps a lease from the clock read
before it is sent, so the lease ends no earlier than that time plus its length.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable

DOUBT_FRACTION = 0.5


class LeaseWatch:
    """The renewals of one worker: its heartbeat's and its current batch's."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._now = monotonic
        self._changed = threading.Condition()
        self._beat_at = -math.inf
        self._token: uuid.UUID | None = None
        self._batch_renewed_at = -math.inf
        self._batch_lease = 0.0

    def now(self) -> float:
        """This watch's clock: what ``claimed`` and ``renewed`` take their ``at`` from."""
        return self._now()

    def claimed(self, token: uuid.UUID, at: float, lease_seconds: float) -> None:
        """A batch was claimed under ``token`` by a claim sent at ``at``; its shortest
        lease is ``lease_seconds`` long."""
        with self._changed:
            self._token, self._batch_renewed_at, self._batch_lease = token, at, lease_seconds

    def finished(self) -> None:
        """The batch is done (run, handed back or left to the reaper): nothing to renew."""
        with self._changed:
            self._token = None

    def renewed(self, token: uuid.UUID | None, at: float) -> None:
        """A heartbeat sent at ``at`` succeeded; it renewed the batch of ``token`` (None:
        the worker held nothing when it was sent)."""
        with self._changed:
            self._beat_at = max(self._beat_at, at)
            if token is not None and token == self._token:
                self._batch_renewed_at = max(self._batch_renewed_at, at)
            self._changed.notify_all()

    def batch_in_doubt(self) -> bool:
        """More than half of the current batch's lease passed without a renewal."""
        with self._changed:
            if self._token is None:
                return False
            return self._now() - self._batch_renewed_at > DOUBT_FRACTION * self._batch_lease

    def heartbeat_in_doubt(self, lease_seconds: float) -> bool:
        """No heartbeat succeeded within half of ``lease_seconds`` (or none ever did)."""
        with self._changed:
            return self._now() - self._beat_at > DOUBT_FRACTION * lease_seconds

    def wait_for_heartbeat(self, timeout: float) -> None:
        """Block until a heartbeat succeeds or ``timeout`` seconds pass."""
        with self._changed:
            self._changed.wait(timeout)
