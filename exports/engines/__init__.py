"""The query engines an export runs on, built from settings: PostgreSQL (Conveyor's own
datasets) and Trino/Starburst (mapping entities that are queries)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from exports import conf

if TYPE_CHECKING:
    from exports.engines.postgres import PostgresEngine
    from exports.engines.trino import TrinoEngine


logger = logging.getLogger(__name__)
T = TypeVar("T")


class NotConfigured(Exception):
    """A job for an engine this process has no settings for."""


class Cancelled(Exception):
    """An export stopped because its job is no longer this worker's to finish: cancelled
    by an operator, past its maximum duration, or its claim taken back."""


class Cancellation:
    """Stops a running export from another thread. The engine registers how to stop what
    it is doing at the moment (``on_cancel``: cancel the PostgreSQL query, the Trino
    query), and checks between batches (``check``); ``cancel`` runs the callbacks once.
    A callback registered after the cancel runs at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []
        self.reason = ""
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def on_cancel(self, callback: Callable[[], object]) -> None:
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)
                return
        _run(callback)

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled, self.reason = True, reason
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _run(callback)

    def check(self) -> None:
        """Raise ``Cancelled`` once cancelled."""
        if self._cancelled:
            raise Cancelled(self.reason)

    def between(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, checked before each (the batches of an export)."""
        for item in items:
            self.check()
            yield item


def _run(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception as error:  # the export stops at its next check either way
        logger.warning("stopping an export: %s", error)


def trino_engine() -> TrinoEngine:
    from exports.engines.trino import TrinoEngine, TrinoSettings

    url = conf.get("TRINO_URL")
    if not url:
        raise NotConfigured("no Trino is configured (EXPORTS_TRINO_URL)")
    return TrinoEngine(
        TrinoSettings(
            url=url,
            user=conf.get("TRINO_USER"),
            password=conf.get("TRINO_PASSWORD"),
            client_tags=tuple(conf.get("CLIENT_TAGS")),
            source=conf.get("SOURCE"),
            request_timeout=float(conf.get("TRINO_REQUEST_TIMEOUT_SECONDS")),
            verify=bool(conf.get("TRINO_VERIFY")),
            storage_options=dict(conf.get("STORAGE_OPTIONS")),
            export_root=conf.storage_url(),
        )
    )


def postgres_dsn() -> str:
    """The read-only connection for datasets; the app's own database unless set apart."""
    dsn = conf.get("POSTGRES_URL")
    if dsn:
        return dsn
    from django.db import connection
    from psycopg.conninfo import make_conninfo

    params = connection.get_connection_params()
    keys = ("host", "port", "dbname", "user", "password")
    return make_conninfo(**{key: str(params[key]) for key in keys if params.get(key)})


def postgres_engine() -> PostgresEngine:
    from exports.engines.postgres import PostgresEngine

    return PostgresEngine(postgres_dsn(), storage_options=dict(conf.get("STORAGE_OPTIONS")))
