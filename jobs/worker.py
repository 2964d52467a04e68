"""The engine's worker: claim a batch, run it, wait for NOTIFY, repeat.

One ``EngineWorker`` runs per cluster process (see ``jobs.cluster``). Its main loop
claims due jobs in batches and runs each handler; a heartbeat thread renews the leases
of the jobs it holds, flushes throttled progress and keeps the ``Worker`` row fresh;
every few seconds one worker (by advisory lock) runs the reaper. Stopping is
cooperative: the current job finishes, unstarted claimed jobs are handed back.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from typing import Any

from django.db import close_old_connections, transaction

from jobs import clock, conf, engine, metrics, reaper, registry
from jobs.context import JobContext, ProgressSlot
from jobs.errors import LeaseLost, PermanentError, Snooze
from jobs.models import Job, Worker
from jobs.notify import Listener

logger = logging.getLogger(__name__)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class EngineWorker:
    def __init__(self, *, name: str | None = None, queues: list[str] | None = None,
                 batch_size: int | None = None) -> None:
        self.name = name or default_worker_name()
        self.queues = list(queues if queues is not None else conf.queues())
        self.batch_size = batch_size or conf.claim_batch()
        self.stopping = threading.Event()
        # Set only once the run loop has ended: the heartbeat must keep renewing the lease
        # of the job that is finishing after stop(), or a reaper elsewhere rescues it.
        self._finished = threading.Event()
        self._listener = Listener(engine.NOTIFY_CHANNEL)
        self._lock = threading.Lock()
        self._token: uuid.UUID | None = None
        self._held: set[int] = set()
        self._current: tuple[int, ProgressSlot] | None = None
        self._last_reap = 0.0
        self.jobs_done = 0

    # --- lifecycle ------------------------------------------------------------------------

    def run(self, *, exit_when_idle: bool = False) -> None:
        """Work until ``stop()`` is called (from a signal handler or another thread), or,
        with ``exit_when_idle``, until a claim finds nothing due (drain, then return)."""
        self._finished.clear()
        self._register()
        beat = threading.Thread(target=self._heartbeat_loop, name=f"{self.name}-heartbeat",
                                daemon=True)
        beat.start()
        logger.info("worker %s started", self.name, extra={"worker": self.name, "queues": self.queues})
        try:
            while not self.stopping.is_set():
                self.maybe_reap()
                if not self.run_once():
                    if exit_when_idle:
                        break
                    self._idle_wait()
                close_old_connections()
        finally:
            self._listener.close()
            self.stopping.set()
            self._finished.set()
            beat.join(timeout=5)
            self._unregister()
            logger.info("worker %s stopped after %d jobs", self.name, self.jobs_done)

    def stop(self) -> None:
        self.stopping.set()

    def _idle_wait(self) -> None:
        """Sleep until a NOTIFY, the poll interval, or a stop request, whichever is first.

        The wait is sliced so that a stop request is noticed within a quarter second.
        """
        deadline = time.monotonic() + conf.poll_seconds()
        while not self.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._listener.wait(min(left, 0.25)):
                return

    def run_once(self) -> int:
        """Claim one batch and run it; the number of jobs run (0: nothing was due)."""
        batch = engine.claim(self.name, limit=self.batch_size, queues=self.queues)
        if not batch.jobs:
            return 0
        metrics.claimed(len(batch.jobs))
        with self._lock:
            self._token, self._held = batch.token, {job.pk for job in batch.jobs}
        claimed_at, ran = time.monotonic(), 0
        try:
            for index, job in enumerate(batch.jobs):
                held_too_long = time.monotonic() - claimed_at > conf.claim_hold_seconds()
                if self.stopping.is_set() or (held_too_long and index > 0):
                    engine.release(batch.jobs[index:], batch.token, worker=self.name)
                    break
                self.run_job(job, batch.token)
                ran += 1
                with self._lock:
                    self._held.discard(job.pk)
        finally:
            with self._lock:
                self._token, self._held = None, set()
        return ran

    def maybe_reap(self) -> None:
        if time.monotonic() - self._last_reap >= conf.reaper_seconds():
            self._last_reap = time.monotonic()
            reaper.reap()

    # --- one attempt ------------------------------------------------------------------------

    def run_job(self, job: Job, token: uuid.UUID) -> str:
        """Run one claimed job to an outcome; returns the outcome's name."""
        handler = registry.get(job.type)
        ctx = JobContext(job=job, clock=clock.get_clock(), worker=self.name)
        with self._lock:
            self._current = (job.pk, ctx.progress_slot)
        started = time.perf_counter()
        try:
            outcome = self._attempt(handler, ctx, token)
        except LeaseLost as lost:
            outcome = "refused"
            engine.record_refusal(job, str(lost).split(";")[-1].strip(), worker=self.name)
        finally:
            with self._lock:
                self._current = None
        metrics.finished(job.type, outcome, time.perf_counter() - started)
        self.jobs_done += 1
        return outcome

    def _attempt(self, handler: registry.Handler | None, ctx: JobContext, token: uuid.UUID) -> str:
        job = ctx.job
        try:
            if handler is None:
                raise PermanentError(f"no handler registered for {job.type!r}")
            if handler.atomic:
                with transaction.atomic():
                    self._succeed(handler, ctx, token)
            else:
                self._succeed(handler, ctx, token)
            return "succeeded"
        except LeaseLost:
            raise
        except Snooze as snooze:
            engine.snooze(job, token, snooze.seconds, message=str(snooze), worker=self.name)
            return "snoozed"
        except PermanentError as error:
            engine.fail(job, token, _describe(error), permanent=True, worker=self.name)
            return "failed"
        except Exception as error:  # any other exception is transient by contract
            logger.warning("job %s (%s) attempt %s failed", job.pk, job.type, job.attempts,
                           exc_info=True, extra={"job": job.pk, "type": job.type})
            state = engine.fail(job, token, _describe(error, with_traceback=True), worker=self.name)
            return "retried" if state == Job.State.PENDING else "failed"

    def _succeed(self, handler: registry.Handler, ctx: JobContext, token: uuid.UUID) -> None:
        result = handler(ctx)
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            raise PermanentError(f"handler returned a result that is not JSON: {exc}") from exc
        engine.complete(ctx.job, token, result=result, worker=self.name, children=ctx.children,
                        progress=ctx.progress_slot.take())

    # --- heartbeat thread ---------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = conf.heartbeat_seconds()
        tick = max(interval / 4, 0.05)
        last_beat = 0.0
        try:
            while not self._finished.wait(tick):
                self._flush_progress()
                if time.monotonic() - last_beat >= interval:
                    last_beat = time.monotonic()
                    self._beat()
        finally:
            close_old_connections()

    def _beat(self) -> None:
        with self._lock:
            token, held = self._token, list(self._held)
        try:
            if token is not None:
                engine.heartbeat(token, held)
            Worker.objects.filter(name=self.name).update(last_seen_at=clock.now(),
                                                         jobs_done=self.jobs_done)
        except Exception:  # a failed beat is retried next tick; the lease has slack
            logger.exception("heartbeat of %s failed", self.name)
            close_old_connections()

    def _flush_progress(self) -> None:
        with self._lock:
            current, token = self._current, self._token
        if current is None or token is None:
            return
        job_id, slot = current
        value = slot.take()
        if value is not None:
            try:
                engine.record_progress(job_id, token, *value, worker=self.name)
            except Exception:
                logger.exception("progress of job %s not recorded", job_id)

    # --- the Worker row -------------------------------------------------------------------------

    def _register(self) -> None:
        now = clock.now()
        Worker.objects.update_or_create(
            name=self.name,
            defaults={"hostname": socket.gethostname(), "pid": os.getpid(), "queues": self.queues,
                      "started_at": now, "last_seen_at": now},
        )

    def _unregister(self) -> None:
        try:
            Worker.objects.filter(name=self.name).delete()
        except Exception:
            logger.exception("could not unregister worker %s", self.name)


def _describe(error: BaseException, *, with_traceback: bool = False) -> str:
    text = f"{type(error).__name__}: {error}"
    if with_traceback:
        text += "\n" + "".join(traceback.format_tb(error.__traceback__)[-5:])
    return text


def run_until_idle(worker: EngineWorker | None = None, *, max_rounds: int = 10_000) -> int:
    """Run due jobs in this process until none is left (tests, commands); returns count."""
    worker = worker or EngineWorker(name="inline")
    total = 0
    for _ in range(max_rounds):
        ran = worker.run_once()
        if not ran:
            break
        total += ran
    return total


