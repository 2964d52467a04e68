"""What a handler receives: its job, the clock, progress reporting and chaining.

``JobContext`` is part of ``jobs``' public API, which is imported while Django loads its
apps; so this module reads neither the models nor the engine when it is imported (the
engine does, at its own import), only when a handler chains a job.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobs.clock import Clock
from jobs.enqueueing import ChildSpec

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
