"""What a handler receives: its job, the clock, progress reporting, chaining, fenced
batches and the outcomes of the jobs it waited on.

``JobContext`` is part of ``jobs``' public API, which is imported while Django loads its
apps; so this module reads neither the models nor the engine when it is imported (the
engine does, at its own import), only when a handler calls one of its methods.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction

from jobs.clock import Clock
from jobs.enqueueing import ChildSpec, Prerequisite

if TYPE_CHECKING:
    from jobs.models import Job


class ProgressSlot:
    """The latest progress of one running job, written by the handler's thread and
    flushed by the worker's heartbeat thread at most a few times a second, so a job
    reporting a million steps writes a handful of rows, not a million."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: tuple[int, int | None, str] | None = None
        self._dirty = False

    def set(self, done: int, total: int | None, message: str) -> None:
        with self._lock:
            self._value = (done, total, message)
            self._dirty = True

    def take(self) -> tuple[int, int | None, str] | None:
        """The value if it changed since the last take, else None."""
        with self._lock:
            if not self._dirty:
                return None
            self._dirty = False
            return self._value

    @property
    def latest(self) -> tuple[int, int | None, str] | None:
        with self._lock:
            return self._value


@dataclass
class JobContext:
    job: Job
    clock: Clock
    worker: str = ""
    progress_slot: ProgressSlot = field(default_factory=ProgressSlot)
    children: list[ChildSpec] = field(default_factory=list)
    # Set when the worker running this job is shutting down (a handler that waits in a
    # loop ends early instead of holding the shutdown up).
    stopping: threading.Event = field(default_factory=threading.Event)
    # Set by the worker running the job: hands back the rest of its batch
    # (``hand_back_others``). None outside a worker, where nothing else is held.
    hand_back: Callable[[], int] | None = field(default=None, repr=False)

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload

    @property
    def tenant_id(self) -> int | None:
        """The tenant the job works for (None: a platform job). A domain handler loads
        every object it touches through it: a payload names objects, it does not vouch
        for them."""
        return self.job.tenant_id

    @property
    def attempt(self) -> int:
        return self.job.attempts

    def now(self) -> datetime:
        return self.clock.now()

    def progress(self, done: int, total: int | None = None, message: str = "") -> None:
        """Report progress; cheap enough to call for every row."""
        self.progress_slot.set(int(done), None if total is None else int(total), message)

    def pause(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True at once if the worker is stopping meanwhile. For a
        handler that works in rounds and should end the job, not hold up the shutdown."""
        return self.stopping.wait(max(0.0, seconds))

    def hand_back_others(self) -> int:
        """Hand back, now, the jobs claimed with this one that have not started, so that
        other workers run them while this handler waits; returns how many went back.

        Call it before a long wait on something outside (a local process that runs for
        minutes). A worker runs the jobs it claimed one after the other, so every job
        claimed after this one would otherwise sit "running" with no attempt counted
        until the wait ends, however many workers are idle. They go back as a stopping
        worker hands its batch back: pending, their attempts uncounted, other workers
        woken. This worker stops renewing their leases and claims anew once this job
        ends. Outside a worker (a bare context in a test) nothing is held: 0.

        Raises ``RuntimeError`` inside a transaction opened since the job started (that
        of an ``atomic=True`` handler, or the handler's own): the hand-back would
        commit, or roll back, with it instead of now.
        """
        return 0 if self.hand_back is None else self.hand_back()

    def chain(self, name: str, payload: dict[str, Any] | None = None, **options: Any) -> None:
        """Enqueue ``name`` when this job succeeds, in the same transaction, in its pipeline.

        Options are those of ``jobs.enqueue`` (unique_key, pending_key, concurrency_key,
        run_after …). They are checked now, so that a bad child fails this attempt here
        rather than its success at commit time.
        """
        from jobs import engine  # needs the models ready: see the module's docstring

        payload = {} if payload is None else payload
        engine.check_enqueue(name, payload, **options)
        self.children.append(ChildSpec(name, payload, options))

    def hold_lease(self) -> None:
        """Raise ``jobs.LeaseLost`` unless this attempt still holds its job's lease, and
        keep it so until the current transaction ends.

        For handlers declared ``atomic=False``, which commit their own transactions
        outside the one that records their outcome: a worker that stalls past its lease
        has its job rescued and run again while it may still be writing. Called last in
        each of its transactions, just before the commit, this share-locks the job row:
        a rescue, cancel or recovery that comes later waits for the commit, and one
        that came earlier makes this raise, so the transaction rolls back and the stale
        attempt stops. The next attempt never overlaps a batch of the old one. Taken
        last, the lock lasts only for the commit, and never holds up the worker's own
        progress writes and heartbeat to that row.
        """
        self._hold_lease(relaxed=False)

    def _hold_lease(self, *, relaxed: bool) -> None:
        from jobs import engine

        engine.hold_lease(self.job, relaxed=relaxed)

    @contextlib.contextmanager
    def batch(self, *, relaxed: bool = True) -> Iterator[None]:
        """One batch of a long handler: a transaction that commits only while this
        attempt holds its lease (``hold_lease``, taken at the end of the block).

        ``relaxed``: the commit does not wait for the log to reach the disk. Safe for a
        batch that a later attempt writes again if it is lost: the job's outcome is
        committed synchronously later, which flushes the log past every batch, so only a
        database crash before that loses batches, of an attempt that then never
        succeeded. Saves a disk flush per batch, hundreds in a large load.
        """
        # Inside a caller's transaction, relaxing would relax the caller's commit.
        relaxed = relaxed and not connection.in_atomic_block
        with transaction.atomic():
            yield
            # synchronous_commit is read at commit: setting it with the lease, just
            # before, relaxes this commit without a round trip of its own.
            self._hold_lease(relaxed=relaxed)

    def prerequisites(self) -> list[Prerequisite]:
        """The jobs this one waited on (``enqueue(..., after=...)``), in id order, each
        with its state, payload and result. All have finished when the handler runs."""
        from jobs import engine

        return engine.prerequisites(self.job)
