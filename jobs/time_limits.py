"""Every handler runs under a time limit that the worker enforces.

A handler that never returns (a source trickling one byte at a time, a loop that does
not end) would hold its worker forever, and with it a share of every tenant's capacity.
Python cannot kill a thread, so the limit is enforced in two steps by one watcher
thread per worker:

1. At the limit, ``HandlerTimeout`` is raised inside the handler's thread
   (CPython's ``PyThreadState_SetAsyncExc``: the exception surfaces at the next
   bytecode the thread runs). It derives from ``BaseException`` so that a handler's
   ``except Exception`` does not swallow it, and the attempt fails as "ran past its
   time limit", retried like any transient failure.
2. A handler still running ``grace`` seconds later is stuck where Python cannot reach
   it (a C call that does not return, or it swallowed the exception). The worker's
   ``on_stuck`` callback then records the attempt as failed and, in a real worker
   process, exits the process so that its supervisor (django-q2, Kubernetes) starts a
   fresh one.

The asynchronous exception is the one way to interrupt a running thread from Python;
it is CPython's documented C API, used here in one small function and covered by the
tests (``tests/jobs/test_time_limits.py``).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class HandlerTimeout(BaseException):  # noqa: N818 (named for what happened, like KeyboardInterrupt)
    """Raised inside a handler that ran past its time limit."""


@dataclass
class Limit:
    """One handler run's time limit."""

    thread_id: int
    seconds: float
    deadline: float
    job_id: int
    interrupted_at: float | None = None
    reported_stuck: bool = False
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def fired(self) -> bool:
        return self.interrupted_at is not None


def _raise_in_thread(thread_id: int, exception: type[BaseException] | None) -> None:
    """Make ``exception`` surface in the thread at its next bytecode; None withdraws a
    pending one that has not surfaced yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else None
    )


class Watcher:
    """Watches the handler runs of one worker (one at a time) from a daemon thread."""

    def __init__(self, *, grace: float, on_stuck: Callable[[Limit], None]) -> None:
        self.grace = grace
        self.on_stuck = on_stuck
        self._current: Limit | None = None
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wakes_at: float | None = None

    def call(self, func: Callable[[], T], *, seconds: float, job_id: int) -> T:
        """``func()`` under a limit of ``seconds``; HandlerTimeout if the limit fired, even
        if ``func`` caught the interruption or returned meanwhile.

        The interruption may surface at any call or loop in this thread until it is
        withdrawn, so ``func`` runs, and the limit is ended, inside handlers that catch
        it wherever it lands; between them nothing runs that could let it surface.
        """
        limit = Limit(threading.get_ident(), seconds, time.monotonic() + seconds, job_id)
        error: BaseException | None = None
        try:
            self._arm(limit)
            result = func()
        except BaseException as exc:
            error = exc
        while True:
            try:
                self._disarm(limit)
                break
            except HandlerTimeout:
                continue  # it surfaced here rather than in func: limit.fired says so
        if limit.fired:
            # The interruption itself (it arrives without a message), or whatever the
            # handler raised after catching it.
            cause = None if isinstance(error, HandlerTimeout) else error
            raise HandlerTimeout(f"ran past its time limit of {seconds:g} s") from cause
        if error is not None:
            raise error
        return result

    def _arm(self, limit: Limit) -> None:
        with self._wake:
            self._current = limit
            # Wake the watcher only if it would otherwise sleep past this deadline: with
            # one limit for most handlers, it rarely has to.
            if self._wakes_at is None or self._wakes_at > limit.deadline:
                self._wake.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="handler-time-limits", daemon=True)
            self._thread.start()

    def _disarm(self, limit: Limit) -> None:
        """After this returns, no interruption of this run can surface any more: the
        watcher interrupts only under ``limit.lock`` and only while the run is not done,
        so once ``done`` is set under that lock, an interruption was sent before or
        never, and a pending one is withdrawn here (``call`` retries this if it surfaces
        on the way)."""
        with limit.lock:
            limit.done = True
            if limit.fired:
                _raise_in_thread(limit.thread_id, None)
        with self._wake:
            if self._current is limit:
                self._current = None

    def _watch(self) -> None:
        while True:
            with self._wake:
                limit = self._current
                wait = self._next_wait(limit)
                self._wakes_at = None if wait is None else time.monotonic() + wait
                self._wake.wait(wait)
                self._wakes_at = None
                limit = self._current
            if limit is not None:
                self._enforce(limit)

    def _next_wait(self, limit: Limit | None) -> float | None:
        if limit is None or limit.done or limit.reported_stuck:
            return None
        due = limit.deadline if limit.interrupted_at is None else limit.interrupted_at + self.grace
        return max(due - time.monotonic(), 0.0)

    def _enforce(self, limit: Limit) -> None:
        now = time.monotonic()
        with limit.lock:
            if limit.done:
                return
            interrupted = not limit.fired and now >= limit.deadline
            if interrupted:
                limit.interrupted_at = now
                _raise_in_thread(limit.thread_id, HandlerTimeout)
            stuck = (
                not interrupted
                and limit.interrupted_at is not None  # it fired
                and not limit.reported_stuck
                and now >= limit.interrupted_at + self.grace
            )
            if stuck:
                limit.reported_stuck = True
        # Outside the lock: a slow log handler must not hold up the handler's own thread
        # on its way out (_disarm takes the same lock).
        if interrupted:
            logger.warning(
                "job %s ran past its time limit of %g s; interrupted",
                limit.job_id,
                limit.seconds,
                extra={"job": limit.job_id},
            )
        elif stuck:
            self.on_stuck(limit)
