"""The wake-up channel: a dedicated autocommit connection LISTENing for new work.

Enqueue runs ``pg_notify`` inside the caller's transaction, so PostgreSQL delivers the
signal exactly when the jobs become visible (on commit) and never for a rollback.
"""

from __future__ import annotations

import psycopg
from django.db import connections


def raw_connection(alias: str = "default") -> psycopg.Connection:
    """A new autocommit psycopg connection to the same database as Django's ``alias``."""
    params = dict(connections[alias].get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    return psycopg.connect(autocommit=True, **params)


class Listener:
    """Waits for NOTIFY on one channel; a poll timeout is the safety net."""

    def __init__(self, channel: str, alias: str = "default") -> None:
        self.channel = channel
        self.alias = alias
        self._conn: psycopg.Connection | None = None

    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = raw_connection(self.alias)
            self._conn.execute(f'LISTEN "{self.channel}"')
        return self._conn

    def listen(self) -> None:
        """Subscribe now. A worker calls this before it first looks for work: a job
        enqueued between that look and the first ``wait`` must still wake it."""
        try:
            self._connect()
        except psycopg.OperationalError:
            self.close()  # wait() retries; the poll timeout covers the gap

    def wait(self, timeout: float) -> list[str]:
        """Block until a notification arrives or ``timeout`` passes; return payloads."""
        try:
            conn = self._connect()
            return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
        except psycopg.OperationalError:
            self.close()  # the next wait reconnects; the caller polls meanwhile
            return []

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
