"""Batches of committed JobEvents straight from PostgreSQL: LISTEN, then one query per
batch of notifications (the mode without ``REDIS_URL``; the Redis relay uses it too)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from django.db import connections

from console.streams import serialize
from console.streams.batch import Batch
from jobs.notify import session_alias

CHANNEL = "conveyor_job_events"
TICK = 1.0  # seconds between empty batches, so that the hub can notice it is idle


def connection_params(alias: str | None = None) -> dict[str, Any]:
    params = dict(connections[alias or session_alias()].get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    return params


async def connect(name: str, alias: str | None = None) -> psycopg.AsyncConnection[Any]:
    """A connection of the web process's own, named ``name`` in ``pg_stat_activity`` (the
    connection budget in docs/deploy.md counts them by name)."""
    params = {**connection_params(alias), "application_name": name}
    conn = await psycopg.AsyncConnection.connect(autocommit=True, **params)
    await conn.execute("SET TIME ZONE 'UTC'")
    return conn


async def load_batch(conn: psycopg.AsyncConnection[Any], payloads: list[str]) -> Batch:
    """The events the payloads name, with the jobs and pipelines they finished: two or
    three queries however many events."""
    ranges = [r for payload in payloads for r in serialize.parse_ranges(payload)]
    cur = await conn.execute(serialize.EVENTS_IN_RANGES, serialize.range_params(ranges))
    events = [serialize.event_from_row(row) for row in await cur.fetchall()]
    return Batch(events, await load_ends(conn, events))


async def load_ends(
    conn: psycopg.AsyncConnection[Any], events: list[serialize.StreamEvent]
) -> list[serialize.End]:
    jobs, pipelines = serialize.finished_keys(events)
    if not jobs:
        return []
    job_rows = await (await conn.execute(serialize.FINISHED_JOBS, {"jobs": jobs})).fetchall()
    pipeline_rows = await (
        await conn.execute(serialize.FINISHED_PIPELINES, {"pipelines": pipelines})
    ).fetchall()
    return serialize.ends_from_rows(job_rows, pipeline_rows)


class PostgresSource:
    """LISTEN on one connection (a reader task queues payloads), load on another.

    With ``lock``, the listening session first waits for that advisory lock: the Redis
    relay's election (the lock goes with the session, so a dead holder frees it).
    """

    def __init__(self, lock: int | None = None) -> None:
        self.lock = lock

    async def batches(self, ready: asyncio.Event) -> AsyncIterator[Batch]:
        listener = await connect("conveyor stream listen")
        loader: psycopg.AsyncConnection[Any] | None = None
        reader: asyncio.Task[None] | None = None
        try:
            if self.lock is not None:
                await _acquire(listener, self.lock)
            loader = await connect("conveyor stream load")
            payloads: asyncio.Queue[str] = asyncio.Queue()
            await listener.execute(f'LISTEN "{CHANNEL}"')
            reader = asyncio.get_running_loop().create_task(_read(listener, payloads))
            ready.set()
            while True:
                pending = await _drain(payloads, reader)
                yield await load_batch(loader, pending) if pending else Batch([], [])
        finally:
            if reader is not None:
                reader.cancel()
            for conn in (listener, loader):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()


async def _acquire(conn: psycopg.AsyncConnection[Any], lock: int) -> None:
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", [lock])
        row = await cur.fetchone()
        if row and row[0]:
            return
        await asyncio.sleep(TICK)


async def _read(conn: psycopg.AsyncConnection[Any], out: asyncio.Queue[str]) -> None:
    async for notify in conn.notifies():
        out.put_nowait(notify.payload)


async def _drain(payloads: asyncio.Queue[str], reader: asyncio.Task[None]) -> list[str]:
    """Everything queued, waiting up to TICK for the first; re-raises a dead reader's error."""
    if reader.done():
        reader.result()
        raise ConnectionError("the LISTEN connection closed")
    try:
        first = await asyncio.wait_for(payloads.get(), TICK)
    except TimeoutError:
        return []
    batch = [first]
    while not payloads.empty():
        batch.append(payloads.get_nowait())
    return batch
