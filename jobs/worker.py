"""The engine's worker: claim a batch, run it, wait for NOTIFY, repeat.

One ``EngineWorker`` runs per cluster process (see ``jobs.cluster``). Its main loop
claims due jobs in batches and runs each handler; a heartbeat thread (``jobs.heartbeat``)
renews the leases of the jobs it holds, flushes throttled progress and keeps the
``Worker`` row fresh;
every few seconds one worker (by advisory lock) runs the reaper. Stopping is
cooperative: the current job finishes, unstarted claimed jobs are handed back.

Database faults (a restart, a failover, connections exhausted) end no worker. Every step
of its life is tried again after a failure, with a capped and jittered backoff
(``jobs.backoff.WORKER_STEP_BACKOFF``): registering, LISTEN, claiming, heartbeating. A
step that fails closes its connection, and the next try opens a new one; a stop request
is noticed during every wait. The ``Worker`` row is written by the heartbeat, which
writes it again whenever it is missing: a worker whose row the reaper deleted (its
process was paused, or could not reach the database, for longer than
``WORKER_STALE_SECONDS``) is listed again at its next beat.

Leases are trusted only while the heartbeat renews them (``jobs.leases`` has the rule):
once more than half of a lease has passed since the last renewal, the worker starts no
further job of its batch and hands the rest back (or leaves them to the reaper, if it
cannot reach the database either); it claims nothing until a heartbeat succeeds again.
A handler already running goes on; its result is fenced like any other.

A worker thread ends only when asked to stop (or, with ``exit_when_idle``, when nothing
is due); anything else that ends it is raised from ``run``, and its process exits so
that its supervisor replaces it (``jobs.cluster``, ``jobs_worker``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction

from jobs import clock, conf, engine, metrics, reaper, registry
from jobs.backoff import FailureStreak
from jobs.context import JobContext, ProgressSlot
from jobs.errors import LeaseLost, PermanentError, Snooze
from jobs.heartbeat import Heartbeat, Holdings, label_connection, step_failed, unregister
from jobs.leases import LeaseWatch
from jobs.models import Job
from jobs.notify import CHANNEL, Listener
from jobs.time_limits import HandlerTimeout, Limit, Watcher

logger = logging.getLogger(__name__)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# The exit status of a worker process that ends itself because a handler would not stop,
# and how long it tries to record that before it exits anyway.
EXIT_STUCK_HANDLER = 70
STUCK_RECORD_SECONDS = 5.0


class EngineWorker:
    def __init__(
        self,
        *,
        name: str | None = None,
        queues: list[str] | None = None,
        batch_size: int | None = None,
        exit_when_stuck: bool = False,
    ) -> None:
        """``exit_when_stuck``: a worker process (the cluster's, ``jobs_worker``) ends
        itself when a handler runs on past its time limit and the interruption, so that
        its supervisor replaces it; in tests and inline runs it only reports it."""
        self.name = name or default_worker_name()
        self.exit_when_stuck = exit_when_stuck
        self._time_limits = Watcher(grace=conf.stuck_grace_seconds(), on_stuck=self._on_stuck)
        self.queues = list(queues if queues is not None else conf.queues())
        self.batch_size = batch_size or conf.claim_batch()
        # Without an explicit batch size the claims follow the pace of the work (below).
        self._adaptive = batch_size is None
        self._seconds_per_job: float | None = None
        self.stopping = threading.Event()
        # stop() sets both; the run loop sets ``stopping`` too on its way out, whatever
        # ended it, so only this one tells a requested stop from a failure.
        self._stop_requested = threading.Event()
        # Set only once the run loop has ended: the heartbeat must keep renewing the lease
        # of the job that is finishing after stop(), or a reaper elsewhere rescues it.
        self._finished = threading.Event()
        self._listener = Listener(CHANNEL, application_name=f"conveyor listen {self.name}")
        self._lock = threading.Lock()
        self._token: uuid.UUID | None = None
        self._batch: list[Job] = []
        self._held: set[int] = set()
        # A handler of the batch handed back the rest of it (ctx.hand_back_others).
        self._handed_back = False
        # Jobs of the held batch whose attempts were counted (engine.start).
        self._started: set[int] = set()
        self._current: tuple[int, ProgressSlot] | None = None
        # When its leases were last renewed (jobs.leases); replaceable in tests.
        self.leases = LeaseWatch()
        # Claimed jobs known not to have run, to hand back once the database answers, and
        # which of them had their attempts counted (given back with them).
        self._unstarted: tuple[uuid.UUID, list[Job], set[int]] | None = None
        self._group_seconds: float | None = None  # a group's handlers' time limit
        self._last_reap = 0.0
        # How long each type's handler took last time: fast ones share commits.
        self._durations: dict[str, float] = {}
        self._connection: Any = None
        self._drain_logged = False
        self.jobs_done = 0

    # --- lifecycle ------------------------------------------------------------------------

    def run(self, *, exit_when_idle: bool = False) -> None:
        """Work until ``stop()`` is called (from a signal handler or another thread), or,
        with ``exit_when_idle``, until a claim finds nothing due (drain, then return).

        Database faults are waited out, never raised; whatever else ends the loop is
        raised, and the caller's process should then exit to be replaced.
        """
        self._finished.clear()
        self._listener.listen()
        beat = Heartbeat(self, self._finished)
        beat.start()
        logger.info("worker %s started", self.name, extra={"worker": self.name, "queues": self.queues})
        failures = FailureStreak()
        try:
            while not self.stopping.is_set():
                if self.leases.heartbeat_in_doubt(conf.lease_seconds()):
                    # Not registered yet, or the heartbeat cannot reach the database: the
                    # leases of a batch claimed now would not be renewed.
                    self._await_heartbeat(beat)
                    continue
                try:
                    label_connection(f"conveyor engine {self.name}")
                    self.maybe_reap()
                    ran = 0 if self.draining() else self.run_once()
                    if not ran and not exit_when_idle:
                        self._idle_wait()
                    self._recycle_connection()
                except Exception as error:
                    # A lost connection (database restart, failover) or any other error
                    # of a step: close, wait, try again. Jobs of a failed batch that never
                    # started go back once the database answers; the one that was running
                    # goes back through the reaper when its lease ends.
                    step_failed(self.name, "claim loop", error, failures, self.stopping)
                    continue
                failures.succeeded()
                if not ran and exit_when_idle:
                    break
        finally:
            self._wind_down(beat)

    def _wind_down(self, beat: Heartbeat) -> None:
        self._listener.close()
        self.stopping.set()
        try:
            self._hand_back_unstarted()
        except Exception:
            logger.exception("worker %s: claimed jobs left to the reaper", self.name)
        self._finished.set()
        beat.join(timeout=5)
        unregister(self.name)
        logger.info("worker %s stopped after %d jobs", self.name, self.jobs_done)

    def stop(self) -> None:
        self._stop_requested.set()
        self.stopping.set()

    def draining(self) -> bool:
        """Whether the drain file (``JOBS_DRAIN_FILE``) exists: claim nothing more. The
        loop goes on (reaping, heartbeating) until the stop request; with
        ``exit_when_idle`` it ends, as when nothing is due."""
        path = conf.drain_file()
        if not path or not os.path.exists(path):
            return False
        if not self._drain_logged:
            self._drain_logged = True
            logger.info(
                "worker %s draining (%s exists): it claims nothing more",
                self.name,
                path,
                extra={"worker": self.name},
            )
        return True

    @property
    def stop_requested(self) -> bool:
        """``stop()`` was called: the run loop ended, or will end, because it was asked to."""
        return self._stop_requested.is_set()

    def _await_heartbeat(self, beat: Heartbeat) -> None:
        if not beat.is_alive():
            raise RuntimeError(f"the heartbeat thread of worker {self.name} ended")
        # Sliced so that a stop request is noticed within a quarter second.
        self.leases.wait_for_heartbeat(0.25)

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
        self._hand_back_unstarted()  # of a batch that failed before: first, or never
        sent_at = self.leases.now()
        # The first job starts as soon as the claim returns (``_stop_starting``), so the
        # claim counts its attempt, sparing a round trip before its handler.
        batch = engine.claim(self.name, limit=self._claim_limit(), queues=self.queues, start_first=True)
        if not batch.jobs:
            return 0
        metrics.claimed(len(batch.jobs))
        self.leases.claimed(batch.token, sent_at, _shortest_lease(batch.jobs))
        with self._lock:
            self._token, self._held = batch.token, {job.pk for job in batch.jobs}
            self._batch, self._handed_back = batch.jobs, False
            self._started = set() if batch.started is None else {batch.started}
        claimed_at, ran = time.monotonic(), 0
        try:
            while ran < len(batch.jobs):
                if self._stop_starting(claimed_at, ran):
                    self._unstarted = (batch.token, batch.jobs[ran:], set(self._started))
                    break
                rest = batch.jobs[ran:]
                count = self._run_group(rest, batch.token)
                batch.jobs[ran:] = rest  # in the order the group left them (busy rows after it)
                ran += count
                if self._handed_back:  # what had not started is pending again
                    break
        except BaseException:  # SystemExit from a handler too: what never started goes back
            self._unstarted = (batch.token, self._not_started(batch.jobs), set(self._started))
            raise
        finally:
            self.leases.finished()
            with self._lock:
                self._token, self._held, self._started = None, set(), set()
                self._batch, self._handed_back = [], False
        self._hand_back_unstarted()
        if ran:
            per_job = (time.monotonic() - claimed_at) / ran
            previous = self._seconds_per_job
            self._seconds_per_job = per_job if previous is None else 0.7 * previous + 0.3 * per_job
        return ran

    def _stop_starting(self, claimed_at: float, ran: int) -> bool:
        """Whether the rest of the batch goes back instead of starting: on a stop request;
        after the first job, when the batch was held past ``CLAIM_HOLD_SECONDS`` or its
        leases are in doubt (``jobs.leases``). The first job always starts: the claim
        stamped its lease just now, and claims wait for a working heartbeat."""
        if self.stopping.is_set() or self.draining():
            return True
        if ran == 0:
            return False
        if self.leases.batch_in_doubt():
            logger.warning(
                "worker %s: leases not renewed for half their length; handing back the rest of the batch",
                self.name,
                extra={"worker": self.name},
            )
            return True
        return time.monotonic() - claimed_at > conf.claim_hold_seconds()

    def _not_started(self, jobs: list[Job]) -> list[Job]:
        """After a batch failed mid-way: its jobs that surely never started.

        Each finished job leaves ``_held`` as it ends (``_run_and_forget``), so the first
        job still held, in batch order, is the one that was running when it failed (or,
        if the failure came between jobs, one that never started): either way the reaper
        decides about it once its lease ends. Those after it never started.
        """
        with self._lock:
            held = set(self._held)
        return [job for job in jobs if job.pk in held][1:]

    def _hand_back_unstarted(self) -> None:
        """Release the claimed jobs known not to have started (raises if the database
        does not answer; they are kept and tried again, fenced by their token)."""
        if self._unstarted is None:
            return
        token, jobs, started = self._unstarted
        engine.release(jobs, token, worker=self.name, started=started)
        self._unstarted = None

    def _claim_limit(self) -> int:
        """How many jobs to claim: ``CLAIM_BATCH`` until this worker has timed a batch,
        then as many as it starts within a quarter of ``CLAIM_HOLD_SECONDS`` at its recent
        pace, between 1 and ``CLAIM_BATCH_MAX``.

        Small fast jobs then come 50 at a time and share commits, while slow ones (or a
        crowded machine) come a few at a time, so that a batch is rarely held past the
        hold time and handed back to be claimed again.
        """
        if not self._adaptive or self._seconds_per_job is None:
            return self.batch_size
        # A quarter leaves room for a stall (a checkpoint, a crowded CPU) mid-batch.
        fits = conf.claim_hold_seconds() / 4 / max(self._seconds_per_job, 1e-6)
        return max(1, min(max(self.batch_size, conf.claim_batch_max()), int(fits)))

    def _run_group(self, jobs: list[Job], token: uuid.UUID) -> int:
        """Run the first job, and the fast atomic jobs after it, in one transaction;
        return how many ran.

        A commit waits for PostgreSQL to flush its WAL (0.5 ms on a quiet disk here, a few
        when it is busy), longer than a small job runs, so fast atomic jobs share one. Nothing is
        weakened: the group first locks its jobs' rows (still running under this lease,
        so no rescue, cancel or recovery can fence them out until the commit); each job
        runs in its own savepoint, so a failure rolls back only its own writes and is
        recorded at once; the successes are recorded together at the end, so each
        handler's writes commit with its job's success. The group closes after
        ``GROUP_COMMIT_SECONDS`` or ``GROUP_COMMIT_JOBS`` so results show promptly, and a
        job whose type is not known to be fast gets a transaction of its own: a slow
        handler would otherwise keep the group's rows locked while it runs.
        """
        fast = conf.group_fast_job_seconds() if conf.group_commit_seconds() > 0 else 0.0
        group = list(
            itertools.takewhile(lambda job: self._groupable(job, fast), jobs[: conf.group_commit_jobs()])
        )
        if len(group) < 2:  # nothing to share a commit with: skip the lock's round trip
            self._run_and_forget(jobs[0], token)
            return 1
        # The group's attempts are counted together, and committed, before its
        # transaction: a worker that dies inside the group has spent them all (it cannot
        # tell which of its handlers ran), rather than none, which would let a job that
        # kills its worker run for ever. A job whose row another session holds locked
        # for a moment (a claim that passed over it) is left to a later group rather than
        # waited for.
        busy = self._count_unless_locked([job for job in group if job.pk not in self._started], token)
        if busy:
            group = self._without_busy(jobs, group, busy, token)
        deadline = time.monotonic() + conf.group_commit_seconds()
        successes: list[engine.Success] = []
        count = 0
        # A handler of the group is interrupted well before PostgreSQL would end the
        # session for idling (``lock_running``): only its own savepoint is lost then,
        # not the whole group's work.
        self._group_seconds = engine.group_idle_bound(group) / 2
        try:
            with transaction.atomic():
                # Locked, the group's jobs cannot be fenced out before this commits: their
                # successes are recorded together at the end, in one statement.
                owned = engine.lock_running(group, token)
                for job in group:
                    if count and (
                        self.stopping.is_set()
                        or time.monotonic() > deadline
                        or not self._groupable(job, fast)
                    ):
                        break
                    count += 1
                    if job.pk not in self._started:
                        self._forget(job)  # taken away before it started: it must not run
                        continue
                    # Fenced out since it started: it runs as if alone, its success refused.
                    self._run_and_forget(job, token, successes if job.pk in owned else None)
                # Those the group closed before reaching get their attempts back with
                # its commit: they start again (and count again) in a later group.
                self._uncount(group[count:], token)
                engine.complete_locked(successes, token, worker=self.name)
        finally:
            self._group_seconds = None
        return count

    def _count_starts(self, jobs: list[Job], token: uuid.UUID) -> None:
        """Count the attempts of ``jobs`` as their handlers are about to run."""
        started = engine.start(jobs, token)
        with self._lock:
            self._started |= started

    def _count_unless_locked(self, jobs: list[Job], token: uuid.UUID) -> set[int]:
        """Count the attempts of those of ``jobs`` whose rows nobody else holds locked;
        return the ids of the busy others."""
        started, busy = engine.start_unless_locked(jobs, token)
        with self._lock:
            self._started |= started
        return busy

    def _without_busy(self, jobs: list[Job], group: list[Job], busy: set[int], token: uuid.UUID) -> list[Job]:
        """The group without its busy jobs, which ``jobs`` (the rest of the batch) then
        lists right after it, to be counted when a later group starts them. If every one
        is busy, their locks are waited for: one of them has to run now."""
        kept = [job for job in group if job.pk not in busy]
        if not kept:
            self._count_starts(group, token)
            return group
        jobs[: len(group)] = kept + [job for job in group if job.pk in busy]
        return kept

    def _uncount(self, jobs: list[Job], token: uuid.UUID) -> None:
        """Give back the counted attempts of ``jobs``, which did not start after all."""
        counted = [job for job in jobs if job.pk in self._started]
        engine.unstart([job.pk for job in counted], token)
        with self._lock:
            self._started -= {job.pk for job in counted}
        for job in counted:
            job.attempts -= 1

    def _groupable(self, job: Job, fast: float) -> bool:
        """Atomic, and its handler took less than ``fast`` seconds last time."""
        handler = registry.get(job.type)
        last = self._durations.get(job.type)
        return handler is not None and handler.atomic and last is not None and last < fast

    def _run_and_forget(
        self, job: Job, token: uuid.UUID, successes: list[engine.Success] | None = None
    ) -> None:
        self.run_job(job, token, successes=successes)
        self._forget(job)

    def _forget(self, job: Job) -> None:
        with self._lock:
            self._held.discard(job.pk)  # finished: the heartbeat stops renewing it

    def _recycle_connection(self) -> None:
        """Between loops: keep this thread's connection unless it broke or grew old.

        ``close_old_connections()`` would close it after every loop when ``CONN_MAX_AGE``
        is 0 (right for web requests), and a new connection (a new PostgreSQL backend)
        costs more than a batch of small jobs and adds to every pickup. Django's own
        checks still apply: a connection that saw an error and fails its health check, or
        was left outside autocommit, is closed; so is one older than
        ``WORKER_CONNECTION_MAX_AGE``.
        """
        if connection.connection is not None and connection.connection is not self._connection:
            self._connection = connection.connection
            keep_until = time.monotonic() + conf.worker_connection_max_age()
            if connection.close_at is not None:
                connection.close_at = max(connection.close_at, keep_until)
        connection.close_if_unusable_or_obsolete()

    def maybe_reap(self) -> None:
        if time.monotonic() - self._last_reap >= conf.reaper_seconds():
            self._last_reap = time.monotonic()
            reaper.reap()

    # --- one attempt ------------------------------------------------------------------------

    def run_job(self, job: Job, token: uuid.UUID, *, successes: list[engine.Success] | None = None) -> str:
        """Run one claimed job to an outcome; returns the outcome's name.

        With ``successes`` (a group whose rows are locked, see ``_run_group``) a success
        is appended there for the group to record, instead of being recorded at once.
        The attempt is counted first, unless its group did (``engine.start``); a job
        taken away since it was claimed (cancelled, recovered, rescued) does not run.
        """
        if job.pk not in self._started:
            self._count_starts([job], token)
            if job.pk not in self._started:
                logger.info(
                    "job %s was taken from %s before it started",
                    job.pk,
                    self.name,
                    extra={"job": job.pk, "worker": self.name},
                )
                return "lost"
        handler = registry.get(job.type)
        # Transactions open now are the caller's (a commit group's, a test's); one opened
        # later, by the handler or around it, refuses a hand-back (``_hand_back_others``).
        depth = len(connection.atomic_blocks)
        ctx = JobContext(
            job=job,
            clock=clock.get_clock(),
            worker=self.name,
            stopping=self.stopping,
            hand_back=lambda: self._hand_back_others(job, token, handler, depth),
        )
        with self._lock:
            self._current = (job.pk, ctx.progress_slot)
        started = time.perf_counter()
        try:
            outcome = self._attempt(handler, ctx, token, successes)
        except LeaseLost as lost:
            outcome = "refused"
            engine.record_refusal(job, str(lost).split(";")[-1].strip(), worker=self.name)
        finally:
            with self._lock:
                self._current = None
        metrics.finished(job.type, outcome, time.perf_counter() - started)
        self.jobs_done += 1
        return outcome

    def _attempt(
        self,
        handler: registry.Handler | None,
        ctx: JobContext,
        token: uuid.UUID,
        successes: list[engine.Success] | None,
    ) -> str:
        job = ctx.job
        try:
            if handler is None:
                raise PermanentError(f"no handler registered for {job.type!r}")
            if handler.atomic:
                with transaction.atomic() if successes is None else _job_savepoint():
                    self._succeed(handler, ctx, token, successes)
            else:
                self._succeed(handler, ctx, token, None)
            return "succeeded"
        except LeaseLost:
            raise
        except HandlerTimeout as timeout:
            return self._timed_out(job, token, timeout)
        except Snooze as snooze:
            engine.snooze(
                job, token, snooze.seconds, message=str(snooze), worker=self.name, wake_on=snooze.wake_on
            )
            return "snoozed"
        except PermanentError as error:
            engine.fail(job, token, _describe(error), permanent=True, worker=self.name)
            return "failed"
        except Exception as error:  # any other exception is transient by contract
            logger.warning(
                "job %s (%s) attempt %s failed",
                job.pk,
                job.type,
                job.attempts,
                exc_info=True,
                extra={"job": job.pk, "type": job.type},
            )
            state = engine.fail(job, token, _describe(error, with_traceback=True), worker=self.name)
            return "retried" if state == Job.State.PENDING else "failed"

    def _hand_back_others(
        self, job: Job, token: uuid.UUID, handler: registry.Handler | None, depth: int
    ) -> int:
        """``ctx.hand_back_others`` of ``job``: release the jobs of its batch that have not
        started, committed at once, and end the batch after ``job``; returns how many.

        Only jobs still held under ``token`` go back, and ``engine.release`` fences each
        by it. Those whose attempts were counted (``_started``) get them back. The
        heartbeat stops renewing them once the release has committed; until then it
        may renew them, which the release's row locks and token make harmless.
        """
        if (handler is not None and handler.atomic) or len(connection.atomic_blocks) > depth:
            why = (
                f"its handler {job.type!r} is atomic, so it runs inside the transaction "
                f"that records its outcome"
                if handler is not None and handler.atomic
                else "it is called inside a transaction"
            )
            raise RuntimeError(
                f"job {job.pk} cannot hand back the jobs claimed with it: {why}, and the "
                f"hand-back would commit or roll back with that transaction instead of now. "
                f"Call it outside any transaction, from a handler declared atomic=False."
            )
        with self._lock:
            if self._token != token:
                return 0
            others = [other for other in self._batch if other.pk in self._held and other.pk != job.pk]
            counted = self._started & {other.pk for other in others}
        if not others:
            return 0
        released = engine.release(
            others,
            token,
            worker=self.name,
            started=counted,
            message=f"handed back unstarted: job {job.pk} of its batch waits on something outside",
        )
        with self._lock:
            self._held -= {other.pk for other in others}
            self._started -= counted
            self._handed_back = True
        logger.info(
            "worker %s: job %s handed back %d jobs claimed with it",
            self.name,
            job.pk,
            released,
            extra={"job": job.pk, "worker": self.name},
        )
        return released

    def _timed_out(self, job: Job, token: uuid.UUID, timeout: HandlerTimeout) -> str:
        """A handler interrupted at its time limit: a transient failure of the attempt."""
        if not connection.in_atomic_block:
            # The interruption may have cut a database round trip in half.
            connection.close()
        state = engine.fail(
            job, token, f"HandlerTimeout: {timeout}", worker=self.name, error_kind=Job.ErrorKind.TIMEOUT
        )
        return "retried" if state == Job.State.PENDING else "failed"

    def _succeed(
        self,
        handler: registry.Handler,
        ctx: JobContext,
        token: uuid.UUID,
        successes: list[engine.Success] | None,
    ) -> None:
        started = time.perf_counter()
        seconds = handler.timeout or conf.handler_timeout_seconds()
        if successes is not None and self._group_seconds is not None:
            seconds = min(seconds, self._group_seconds)
        try:
            result = self._time_limits.call(lambda: handler(ctx), seconds=seconds, job_id=ctx.job.pk)
        finally:
            self._durations[handler.name] = time.perf_counter() - started
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            raise PermanentError(f"handler returned a result that is not JSON: {exc}") from exc
        if successes is None:
            engine.complete(
                ctx.job,
                token,
                result=result,
                worker=self.name,
                children=ctx.children,
                progress=ctx.progress_slot.take(),
            )
        else:
            engine.enqueue_children(ctx.job, ctx.children)
            successes.append(engine.Success(ctx.job, result, ctx.progress_slot.take()))

    def _on_stuck(self, limit: Limit) -> None:
        """A handler ignored its interruption for the grace period (blocked in C code, or
        it swallowed the exception). Runs on the time-limit watcher's thread."""
        logger.critical(
            "job %s is still running %g s after its time limit interrupted it",
            limit.job_id,
            self._time_limits.grace,
            extra={"job": limit.job_id, "worker": self.name},
        )
        if not self.exit_when_stuck:
            return
        # The process ends whatever happens below: the stuck thread's open transaction
        # may hold the rows this needs (a commit group locks its jobs), and waiting for
        # them must not keep the process alive. Once it is gone, its connection closes,
        # the locks go with it, and the reaper rescues what it held.
        deadline = threading.Timer(STUCK_RECORD_SECONDS, os._exit, [EXIT_STUCK_HANDLER])
        deadline.daemon = True
        deadline.start()
        try:
            self._record_stuck(limit)
        except Exception:
            logger.exception("could not record the stuck job %s before exiting", limit.job_id)
        finally:
            logging.shutdown()
            os._exit(EXIT_STUCK_HANDLER)

    def _record_stuck(self, limit: Limit) -> None:
        """The stuck attempt fails as a timeout, the rest of the batch goes back unstarted."""
        with self._lock:
            token, held = self._token, set(self._held)
        if token is None:
            return
        with transaction.atomic():
            # Locks held by the stuck transaction are not waited for (see _on_stuck).
            connection.cursor().execute("SET LOCAL lock_timeout = '2s'")
            stuck = Job.objects.get(pk=limit.job_id)
            engine.fail(
                stuck,
                token,
                f"HandlerTimeout: ran past its time limit of "
                f"{limit.seconds:g} s and did not stop; its worker process exited "
                f"to be replaced",
                worker=self.name,
                error_kind=Job.ErrorKind.TIMEOUT,
            )
            unstarted = list(Job.objects.filter(pk__in=held - {limit.job_id}))
            engine.release(unstarted, token, worker=self.name, started=self._started)

    # --- what the heartbeat renews ------------------------------------------------------------

    def holdings(self) -> Holdings:
        """The batch's token, its unfinished jobs and the running one (for the heartbeat)."""
        with self._lock:
            return Holdings(self._token, list(self._held), self._current)


@contextlib.contextmanager
def _job_savepoint() -> Iterator[None]:
    """A grouped job's savepoint: like a nested ``atomic()`` if the job fails, but made
    only when the job first touches the database, and not released when it succeeds.

    On failure the job's writes are rolled back to the savepoint, and so are the
    ``on_commit`` callbacks it registered (Django drops only those of its own atomic
    blocks, so the ones added since the savepoint are cut here). A SAVEPOINT is a round
    trip, as long as the rest of a small job's share of its group's work, and a handler
    that sends nothing (it calls an API, or has nothing to do) has nothing to roll back:
    so the savepoint is set just before the job's first statement, through the
    connection's execute wrappers (``jobs.sql.execute`` goes through them too). On success
    RELEASE would change nothing (the group's commit makes the work durable either way)
    and costs another round trip; the savepoints nest instead, which
    ``GROUP_COMMIT_JOBS`` bounds.
    """
    conn = transaction.get_connection()
    callbacks = len(conn.run_on_commit)
    savepoint = _FirstStatementSavepoint(conn)
    try:
        with conn.execute_wrapper(savepoint), savepoint.on_new_cursors():
            yield
    except BaseException:
        if savepoint.sid is not None:
            transaction.savepoint_rollback(savepoint.sid)
        del conn.run_on_commit[callbacks:]
        # Back at a known-good state: clear the mark an inner atomic(savepoint=False)
        # may have left on the group, as a nested atomic() would.
        transaction.set_rollback(False)
        raise


class _FirstStatementSavepoint:
    """Sets a savepoint before the first statement of a job: as an execute wrapper (the
    ORM's statements and ``jobs.sql``'s), and when a Django cursor is first made, since
    what a cursor sends past ``execute`` (``cursor.copy()``) passes no wrapper."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sid: str | None = None
        self._setting = False

    def __call__(self, execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        self.set()
        return execute(sql, params, many, context)

    def set(self) -> None:
        if self.sid is None and not self._setting:
            self._setting = True  # the SAVEPOINT statement itself makes a cursor
            try:
                self.sid = self.conn.savepoint()
            finally:
                self._setting = False

    @contextlib.contextmanager
    def on_new_cursors(self) -> Iterator[None]:
        """Set the savepoint when the connection first makes a cursor, until exit."""
        create_cursor = self.conn.create_cursor

        def create_then_set(*args: Any, **kwargs: Any) -> Any:
            cursor = create_cursor(*args, **kwargs)
            self.set()
            return cursor

        own = vars(self.conn).get("create_cursor")
        self.conn.create_cursor = create_then_set
        try:
            yield
        finally:
            if own is None:
                del self.conn.create_cursor  # the class's method again
            else:
                self.conn.create_cursor = own


def _shortest_lease(jobs: list[Job]) -> float:
    """The shortest lease, in seconds, that a claim stamped on ``jobs``."""
    return min(
        (
            (job.lease_expires_at - job.locked_at).total_seconds()
            for job in jobs
            if job.lease_expires_at is not None and job.locked_at is not None
        ),
        default=conf.lease_seconds(),
    )


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
