"""A worker's heartbeat: the thread that keeps its leases and its ``Worker`` row alive.

Every ``HEARTBEAT_SECONDS`` it renews the leases of the jobs its worker holds and
refreshes the worker's row, and four times as often it flushes the running job's
throttled progress. The first beat writes the row (that is the worker's registration),
and any beat that finds the row missing writes it again: a reaper deletes the row of a
worker it has not heard from for ``WORKER_STALE_SECONDS``, which a live worker that was
paused (SIGSTOP, a stalled VM) or cut off from the database may be.

A beat that fails closes the thread's connection and is tried again on a new one after a
backoff (``jobs.backoff.WORKER_STEP_BACKOFF``, at most the interval); meanwhile nothing
is renewed, and the worker's lease rule (``jobs.leases``) takes over. Each success is
reported to the worker's ``LeaseWatch`` with the time the beat was sent.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.db import connection

from jobs import clock, conf, engine
from jobs.backoff import WORKER_STEP_BACKOFF, FailureStreak
from jobs.context import ProgressSlot
from jobs.leases import LeaseWatch
from jobs.models import Worker

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holdings:
    """What a worker holds at one moment: its batch's token, the jobs of the batch not yet
    finished, and the running job with its progress slot."""

    token: uuid.UUID | None
    held: list[int]
    current: tuple[int, ProgressSlot] | None


class Holder(Protocol):
    """The worker a heartbeat beats for."""

    name: str
    queues: list[str]
    jobs_done: int
    leases: LeaseWatch

    def holdings(self) -> Holdings: ...


class Heartbeat:
    """Beats for one worker from a daemon thread until ``done`` is set."""

    def __init__(self, holder: Holder, done: threading.Event) -> None:
        self.holder = holder
        self.done = done
        self._started_at: datetime | None = None  # when the row was first written
        self._thread = threading.Thread(target=self._loop, name=f"{holder.name}-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        interval = conf.heartbeat_seconds()
        tick = max(interval / 4, 0.05)
        failures = FailureStreak(
            dataclasses.replace(WORKER_STEP_BACKOFF, cap=min(WORKER_STEP_BACKOFF.cap, interval))
        )
        next_beat = time.monotonic()  # at once: the first beat registers the worker
        try:
            while not self.done.is_set():
                try:
                    if not failures.failures:  # nothing but beats until one succeeds
                        self._flush_progress()
                    if time.monotonic() >= next_beat:
                        next_beat = time.monotonic() + interval
                        self._beat()
                        failures.succeeded()
                except Exception as error:
                    step_failed(self.holder.name, "heartbeat", error, failures, self.done)
                    next_beat = time.monotonic()
                    continue
                self.done.wait(tick)
        finally:
            connection.close()

    def _beat(self) -> None:
        sent_at = self.holder.leases.now()
        holdings = self.holder.holdings()
        label_connection(f"conveyor heartbeat {self.holder.name}")
        if holdings.token is not None:
            engine.heartbeat(holdings.token, holdings.held)
        self._touch_row()
        self.holder.leases.renewed(holdings.token, sent_at)

    def _flush_progress(self) -> None:
        holdings = self.holder.holdings()
        if holdings.current is None or holdings.token is None:
            return
        job_id, slot = holdings.current
        value = slot.take()
        if value is not None:
            # A failure is the heartbeat's (same connection); the final value is recorded
            # with the job's outcome anyway.
            engine.record_progress(job_id, holdings.token, *value, worker=self.holder.name)

    def _touch_row(self) -> None:
        """Refresh the worker's row, or write it if it is missing."""
        updated = Worker.objects.filter(name=self.holder.name).update(
            last_seen_at=clock.now(), jobs_done=self.holder.jobs_done
        )
        if updated or (self._started_at is not None and self.done.is_set()):
            return  # a stopping worker's row was just unregistered: it must stay gone
        if self._started_at is not None:
            logger.warning(
                "worker %s: its row was gone (reaped as dead); registering again",
                self.holder.name,
                extra={"worker": self.holder.name},
            )
        self._write_row()

    def _write_row(self) -> None:
        holder = self.holder
        self._started_at = register_worker(
            holder.name,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=holder.queues,
            jobs_done=holder.jobs_done,
            started_at=self._started_at or clock.now(),
        )


def register_worker(
    name: str,
    *,
    hostname: str,
    pid: int,
    queues: list[str],
    jobs_done: int | None = None,
    started_at: datetime | None = None,
) -> datetime:
    """Write a worker's row whether or not it exists (INSERT … ON CONFLICT): a reaper may
    delete it at any moment. Returns when the worker started (``started_at``, or now for
    a row written the first time; a row that exists keeps its own)."""
    now = clock.now()
    fields = ["hostname", "pid", "queues", "last_seen_at"]
    if started_at is not None:
        fields.append("started_at")
    if jobs_done is not None:
        fields.append("jobs_done")
    Worker.objects.bulk_create(
        [
            Worker(
                name=name,
                hostname=hostname[:200],
                pid=pid,
                queues=queues,
                started_at=started_at or now,
                last_seen_at=now,
                jobs_done=jobs_done or 0,
            )
        ],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=fields,
    )
    return started_at or now


def unregister(name: str) -> None:
    """Delete a stopping worker's row (if the database does not answer, the reaper will)."""
    try:
        Worker.objects.filter(name=name).delete()
    except Exception:
        logger.exception("could not unregister worker %s", name)


def step_failed(
    worker: str, step: str, error: Exception, failures: FailureStreak, until: threading.Event
) -> None:
    """After a failed step of a worker's life: log it (with its traceback the first time
    in a row), close this thread's connection, and wait the backoff's delay, or until
    ``until`` is set (a stop request)."""
    delay = failures.failed()
    logger.warning(
        "worker %s: %s failed (%d in a row: %s); trying again in %.2f s",
        worker,
        step,
        failures.failures,
        str(error).strip() or type(error).__name__,
        delay,
        exc_info=failures.failures == 1,
        extra={"worker": worker},
    )
    connection.close()
    until.wait(delay)


_labelled = threading.local()


def label_connection(name: str) -> None:
    """Name this thread's database connection ``name`` in ``pg_stat_activity`` (once per
    new connection): an operator looking at the sessions or the locks of the database can
    tell which worker, and which of its threads, holds them. Not behind a transaction
    pool, where the name would stay on a server session other clients use next."""
    if getattr(settings, "DATABASE_TRANSACTION_POOLING", False):
        return
    connection.ensure_connection()
    raw = connection.connection
    if getattr(_labelled, "connection", None) is not raw:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('application_name', %s, false)", [name[:63]])
        _labelled.connection = raw
