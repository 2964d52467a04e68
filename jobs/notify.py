"""The wake-up channel: the signal that new work is due, and the dedicated autocommit
connection a worker LISTENs on for it.

Every signal is sent inside the caller's transaction (``notify``, or ``pg_notify`` written
into a statement, as enqueue does), so PostgreSQL delivers it exactly when the jobs become
visible (on commit) and never for a rollback.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, connections

from jobs.backoff import FailureStreak

# The channel workers listen on. Statements that signal from inside themselves (to save
# a round trip) take it as a parameter from here too.
CHANNEL = "conveyor_jobs"


def notify(queue: str = "") -> None:
    """Wake the workers listening on ``CHANNEL`` when the current transaction commits.
    The payload names the queue that has new work ("" for any); a spurious signal finds
    no work, which is harmless."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])


def session_alias() -> str:
    """The database alias of connections that must stay one server session (LISTEN,
    session locks): ``session`` when DATABASE_SESSION_URL sets it (a transaction pool
    elsewhere), else ``default``."""
    return "session" if "session" in settings.DATABASES else "default"


def raw_connection(alias: str = "default", **extra: Any) -> psycopg.Connection:
    """A new autocommit psycopg connection to the same database as Django's ``alias``;
    ``extra`` adds libpq parameters (``application_name``)."""
    params = dict(connections[alias].get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    params.update(extra)
    return psycopg.connect(autocommit=True, **params)


class Listener:
    """Waits for NOTIFY on one channel; a poll timeout is the safety net.

    A lost connection is reopened on a later ``wait``, after a backoff that grows with
    each failed attempt (``jobs.backoff.WORKER_STEP_BACKOFF``); until then ``wait``
    just sleeps its timeout, and the caller's poll finds the work.
    """

    def __init__(
        self, channel: str, alias: str | None = None, *, application_name: str | None = None
    ) -> None:
        self.channel = channel
        self.alias = alias or session_alias()
        self._extra = {"application_name": application_name[:63]} if application_name else {}
        self._conn: psycopg.Connection | None = None
        self._failures = FailureStreak()
        self._next_attempt = 0.0

    def _connect(self) -> psycopg.Connection | None:
        """The open connection, or a new one if a reconnect is due; None meanwhile."""
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if time.monotonic() < self._next_attempt:
            return None
        try:
            conn = raw_connection(self.alias, **self._extra)
        except psycopg.OperationalError:
            self._backoff()
            return None
        try:
            conn.execute(f'LISTEN "{self.channel}"')
        except psycopg.OperationalError:
            conn.close()
            self._backoff()
            return None
        self._conn = conn
        self._failures.succeeded()
        return conn

    def _backoff(self) -> None:
        self._next_attempt = time.monotonic() + self._failures.failed()

    def listen(self) -> None:
        """Subscribe now. A worker calls this before it first looks for work: a job
        enqueued between that look and the first ``wait`` must still wake it. If the
        database does not answer, ``wait`` tries again later; the poll covers the gap."""
        self._connect()

    def wait(self, timeout: float) -> list[str]:
        """Block until a notification arrives or ``timeout`` passes; return payloads."""
        conn = self._connect()
        if conn is None:
            time.sleep(max(0.0, min(timeout, self._next_attempt - time.monotonic())))
            return []
        try:
            return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
        except psycopg.OperationalError:
            self.close()  # reopened by a later wait; the caller polls meanwhile
            self._backoff()
            return []

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
