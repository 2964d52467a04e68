"""Batches of committed JobEvents straight from PostgreSQL: a follower reads the history
table by id (the mode without ``REDIS_URL``; the Redis relay uses it too).

Nothing announces a history row. A NOTIFY sent with each would make every claim and
completion commit wait its turn behind the others (PostgreSQL serialises the commits of
transactions that notified), a cost paid per commit by the engine. The follower costs one
indexed query per ``INTERVAL`` per source instead, whatever the commit rate: it reads the
rows past the newest id it has seen, and the ids it saw skipped (``console.streams.follow``).
The workers' enqueue signal (``jobs.notify.CHANNEL``, one per enqueue statement) wakes it
early, so new jobs stream at once; claims and completions wait for the next read.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
from django.db import connections

from console.streams import serialize
from console.streams.batch import Batch
from console.streams.follow import MAX_HOLES, Follower
from jobs.notify import CHANNEL, session_alias

# Seconds between reads of the history table: the most a claim's or a completion's event
# waits before it is read (they send no signal), for one primary-key probe per interval
# and source when nothing happens. Also how often the hub gets a batch, empty or not, to
# notice it is idle.
INTERVAL = 0.1
# Seconds at least between reads when the enqueue signal wakes the follower early: a
# stream of enqueues costs at most 1/WAKE_GAP reads a second, however many there are.
WAKE_GAP = 0.01
BATCH = 1_000  # rows per read; a full read is followed by the next at once
TICK = 1.0  # seconds between the relay's tries for its lock, and its hubs' empty batches

# The follower's session. Its statements run every INTERVAL with values their plans
# depend on: a generic plan (psycopg prepares a statement after a few runs) of
# ``id > $1`` guesses a third of the table, and the planner's guesses at runs of holes
# are high enough to trigger JIT compilation, which costs far more than these reads.
FOLLOWER_SESSION = "SET plan_cache_mode = force_custom_plan; SET jit = off"
# Where a follower starts: the newest rows, whose missing ids are the transactions still
# open (their rows are new when they commit); a backward scan of the primary key.
NEWEST_IDS = "SELECT id FROM jobs_jobevent ORDER BY id DESC LIMIT %(limit)s"


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


async def start(conn: psycopg.AsyncConnection[Any], now: float) -> Follower:
    """A follower at the newest committed row: it streams what commits from now on."""
    cur = await conn.execute(NEWEST_IDS, {"limit": MAX_HOLES})
    return Follower.starting_after([row[0] for row in reversed(await cur.fetchall())], now)


async def load_batch(
    conn: psycopg.AsyncConnection[Any], follower: Follower, now: float
) -> tuple[Batch, bool]:
    """The rows committed since the last read, those of earlier holes first, with the
    jobs and pipelines they finished, and whether the read was full (more rows may be
    waiting). One query when nothing happened; a few however many events."""
    filled: list[int] = []
    if follower.holes:
        cur = await conn.execute(serialize.IDS_IN_RANGES, serialize.range_params(follower.ranges()))
        filled = [row[0] for row in await cur.fetchall()]
    cur = await conn.execute(serialize.EVENTS_AFTER, {"last": follower.last, "limit": BATCH})
    after = [serialize.event_from_row(row) for row in await cur.fetchall()]
    previous = follower.last
    send = follower.take(filled, [e.id for e in after], now)
    fresh = set(send)
    events = await load_events(conn, [i for i in send if i <= previous]) + [e for e in after if e.id in fresh]
    return Batch(events, await load_ends(conn, events)), len(after) == BATCH


async def load_events(conn: psycopg.AsyncConnection[Any], ids: list[int]) -> list[serialize.StreamEvent]:
    if not ids:
        return []
    cur = await conn.execute(serialize.EVENTS_BY_ID, {"ids": ids})
    return [serialize.event_from_row(row) for row in await cur.fetchall()]


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
    """The follower reads on one connection; the other LISTENs for the enqueue signal.

    With ``lock``, the listening session first waits for that advisory lock: the Redis
    relay's election (the lock goes with the session, so a dead holder frees it).
    ``clock`` times the holes (``console.streams.follow``); ``follower`` is the current one.
    """

    def __init__(self, lock: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = lock
        self.clock = clock
        self.follower: Follower | None = None

    async def batches(self, ready: asyncio.Event) -> AsyncIterator[Batch]:
        listener = await connect("conveyor stream listen")
        loader: psycopg.AsyncConnection[Any] | None = None
        reader: asyncio.Task[None] | None = None
        try:
            if self.lock is not None:
                await _acquire(listener, self.lock)
            loader = await connect("conveyor stream load")
            await loader.execute(FOLLOWER_SESSION)
            wake = asyncio.Event()
            await listener.execute(f'LISTEN "{CHANNEL}"')
            reader = asyncio.get_running_loop().create_task(_read(listener, wake))
            self.follower = follower = await start(loader, self.clock())
            ready.set()
            loop = asyncio.get_running_loop()
            while True:
                began = loop.time()
                batch, full = await load_batch(loader, follower, self.clock())
                yield batch
                if not full:
                    await _wait(wake, reader, began)
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


async def _read(conn: psycopg.AsyncConnection[Any], wake: asyncio.Event) -> None:
    try:
        async for _ in conn.notifies():
            wake.set()
    finally:
        wake.set()  # a dead LISTEN connection is noticed at once, not at the next interval


async def _wait(wake: asyncio.Event, reader: asyncio.Task[None], began: float) -> None:
    """Until ``INTERVAL`` after the last read ``began`` (the loop's time), or an enqueue
    signal but no sooner than ``WAKE_GAP``; re-raises a dead reader's error. A signal
    that came during the read counts: it may be for a commit the read did not see."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(began + INTERVAL):
            await wake.wait()
    wake.clear()
    if reader.done():
        reader.result()
        raise ConnectionError("the LISTEN connection closed")
    gap = began + WAKE_GAP - asyncio.get_running_loop().time()
    if gap > 0:
        await asyncio.sleep(gap)
