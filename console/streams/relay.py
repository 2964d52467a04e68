"""Streams across processes through Redis (``REDIS_URL`` set): one relay, many hubs.

Choice: every web hub subscribes to one channels_redis group; exactly one relay in the
deployment follows the history table (``console.streams.pgsource``), loads each batch of
events once (with the jobs and pipelines they finished) and sends it to the group. So the
database serves one follower whatever the number of web pods, and a hub does no query
at all.

Election: the relay runs in every web process that has a hub, but only the one whose
session holds the PostgreSQL advisory lock ``RELAY_LOCK`` does anything; the others wait
on the lock and take over within about a second when the holder's session ends (process
exit or crash). Events committed during a takeover reach no hub: clients see them again
through Last-Event-ID replay when they reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from channels.layers import get_channel_layer
from django.db import connections

from console.streams.batch import Batch
from console.streams.pgsource import TICK, PostgresSource, connect
from console.streams.serialize import End, StreamEvent

logger = logging.getLogger(__name__)

RELAY_LOCK = 0x636F6E76  # "conv": the advisory lock of the one relay per database
_relays: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}


def group_name() -> str:
    """One group per database, so that deployments (and test runs) sharing a Redis do
    not see each other's events."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(connections["default"].settings_dict["NAME"]))
    return f"jobs-events.{name}"[:99]


def to_message(batch: Batch) -> dict[str, Any]:
    return {
        "type": "job.events",
        "events": [e.to_wire() for e in batch.events],
        "ends": [end.to_wire() for end in batch.ends],
    }


def from_message(message: dict[str, Any]) -> Batch:
    return Batch(
        [StreamEvent.from_wire(e) for e in message["events"]], [End.from_wire(end) for end in message["ends"]]
    )


async def relay() -> None:
    """Forward every batch to the group while this process holds the lock; forever."""
    layer = get_channel_layer()
    group = group_name()
    while True:
        try:
            async for batch in PostgresSource(lock=RELAY_LOCK).batches(asyncio.Event()):
                if batch.events or batch.ends:
                    await layer.group_send(group, to_message(batch))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("job event relay interrupted; retrying")
        await asyncio.sleep(TICK)


def ensure_relay() -> None:
    loop = asyncio.get_running_loop()
    task = _relays.get(loop)
    if task is None or task.done():
        for stale in [key for key, value in _relays.items() if value.done()]:
            del _relays[stale]
        _relays[loop] = loop.create_task(relay(), name="jobs-stream-relay")


class RedisSource:
    """The hub's side: batches from the group, through this process's own channel."""

    async def batches(self, ready: asyncio.Event) -> AsyncIterator[Batch]:
        ensure_relay()
        layer = get_channel_layer()
        group = group_name()
        channel = await layer.new_channel("jobs-hub.")
        await layer.group_add(group, channel)
        receive: asyncio.Task[dict[str, Any]] | None = None
        try:
            await _relay_elected()
            ready.set()
            while True:
                # One receive outlives the ticks: cancelling a receive could drop a message.
                receive = receive or asyncio.ensure_future(layer.receive(channel))
                done, _ = await asyncio.wait({receive}, timeout=TICK)
                if not done:
                    yield Batch([], [])
                    continue
                message, receive = receive.result(), None
                yield from_message(message)
        finally:
            if receive is not None:
                receive.cancel()
            await layer.group_discard(group, channel)


async def _relay_elected(timeout: float = 10.0) -> None:
    """Wait until some session holds the relay lock (its follower starts right after)."""
    conn = await connect("conveyor stream relay check")
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND classid = 0 AND objid = %s AND objsubid = 1 AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database()))",
                [RELAY_LOCK],
            )
            row = await cur.fetchone()
            if row and row[0]:
                await asyncio.sleep(0.05)  # the holder's follower starts after its lock
                return
            await asyncio.sleep(0.05)
        logger.warning("no job event relay holds the lock after %ss; streaming anyway", timeout)
    finally:
        await conn.close()
