"""One hub per web process: it receives every committed JobEvent once and fans it out in
memory to the process's stream subscribers (SSE responses, WebSocket consumers).

Where batches come from (``Source``): without ``REDIS_URL`` the hub follows the history
table itself (``PostgresSource``: it reads the rows past the newest id it has seen, on
its own psycopg connection, woken early by the workers' enqueue signal on a second one):
two connections per web process, whatever the number of clients. With ``REDIS_URL`` the
hub reads ready-made batches from a channels_redis group, filled by the one relay of the
deployment (``console.streams.relay``).

The hub starts with its first subscriber and stops when it has had none for
``STREAMS_IDLE_SECONDS``. A subscriber that falls too far behind, or every subscriber when
the source was interrupted (events may be lost), is marked ``lagged``: an SSE stream then
ends and its client reconnects with Last-Event-ID, which replays what it missed; a
WebSocket is closed with code 4000 and its page reconnects and refreshes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from django.conf import settings

from console.streams import pgsource, relay
from console.streams.batch import Batch, Source
from console.streams.serialize import End, StreamEvent

logger = logging.getLogger(__name__)

MAX_QUEUED = 5_000  # items a subscriber may have waiting before it is cut loose
# Ids remembered to drop repeats. A follower sends each id once, but at a relay takeover
# the old relay can send one more batch after its session (and lock) is gone, while the
# new one already follows.
RECENT_IDS = 20_000


@dataclass
class Filter:
    """What a subscriber wants; an event matches if any of the sets names it."""

    jobs: set[int] = field(default_factory=set)
    pipelines: set[str] = field(default_factory=set)
    types: set[str] = field(default_factory=set)

    def matches(self, event: StreamEvent) -> bool:
        return event.job in self.jobs or event.pipeline in self.pipelines or event.type in self.types

    def wants_end(self, end: End) -> bool:
        kind, key = end.key
        return key in (self.jobs if kind == "job" else self.pipelines)

    def is_empty(self) -> bool:
        return not (self.jobs or self.pipelines or self.types)


class Subscription:
    """One client's mailbox. ``scope`` is its tenant (True: every tenant).

    A plain list and a future rather than an ``asyncio.Queue`` read through ``wait_for``
    (a task per read): with hundreds of clients per event, the per-client cost of a
    fan-out is one list append and one wake-up, and a reader takes everything waiting at
    once (one write per wake-up however many batches came in between).
    """

    def __init__(self, filter: Filter, scope: int | bool) -> None:
        self.filter = filter
        self.scope = scope
        self.pending: list[Batch] = []
        self.lagged = False
        self._waiter: asyncio.Future[None] | None = None

    def allows(self, event: StreamEvent) -> bool:
        return self.scope is True or (event.tenant is not None and event.tenant == self.scope)

    def offer(self, batch: Batch) -> None:
        if self.lagged:
            return
        events = [e for e in batch.events if self.filter.matches(e) and self.allows(e)]
        ends = [end for end in batch.ends if self.filter.wants_end(end) and end.visible_to(self.scope)]
        if not events and not ends:
            return
        if len(self.pending) >= MAX_QUEUED:
            self.cut_loose()
            return
        whole = len(events) == len(batch.events) and len(ends) == len(batch.ends)
        self.pending.append(batch if whole else Batch(events, ends, batch.encoded))
        self._wake()

    def cut_loose(self) -> None:
        self.lagged = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self, timeout: float) -> Batch | None:
        """Everything waiting, as one batch; None after ``timeout`` s without any.
        Raises Lagged when cut loose (after what was queued before)."""
        if not self.pending and not self.lagged:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(timeout, _settle, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        if self.pending:
            batches, self.pending = self.pending, []
            return batches[0] if len(batches) == 1 else merge(batches)
        if self.lagged:
            raise Lagged
        return None


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def merge(batches: list[Batch]) -> Batch:
    encoded: dict[tuple[int, bool], str] = {}
    for batch in batches:
        encoded.update(batch.encoded)
    return Batch([e for b in batches for e in b.events], [end for b in batches for end in b.ends], encoded)


class Lagged(Exception):
    """The subscriber may have missed events (too slow, or the source was interrupted)."""


class Hub:
    def __init__(self) -> None:
        self.subscribers: set[Subscription] = set()
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._recent: OrderedDict[int, None] = OrderedDict()
        self._idle_since: float | None = None
        # Streams open and replay on short-lived connections; a burst of (re)connecting
        # clients queues here rather than exhausting the server's max_connections.
        self.db_slots = asyncio.Semaphore(int(getattr(settings, "STREAMS_DB_SLOTS", 8)))

    async def subscribe(self, filter: Filter, scope: int | bool) -> Subscription:
        """Register a subscriber; returns once the source follows, so that a replay run
        afterwards and the live events overlap rather than leave a gap."""
        sub = Subscription(filter, scope)
        self.subscribers.add(sub)
        if self._task is None or self._task.done():
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="jobs-stream-hub")
        ready = asyncio.ensure_future(self._ready.wait())
        try:
            await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled while waiting (the client went away): no leak
            ready.cancel()
            self.subscribers.discard(sub)
            raise
        if not ready.done():
            ready.cancel()
            self.subscribers.discard(sub)
            self._task.result()  # raises what stopped the hub
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscribers.discard(sub)

    def publish(self, batch: Batch) -> None:
        """Fan ``batch`` out, without the events already sent."""
        fresh = [e for e in batch.events if e.id not in self._recent]
        for event in fresh:
            self._recent[event.id] = None
        while len(self._recent) > RECENT_IDS:
            self._recent.popitem(last=False)
        if fresh or batch.ends:
            shared = Batch(fresh, batch.ends)
            for sub in list(self.subscribers):
                sub.offer(shared)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        source = make_source()
        loop = asyncio.get_running_loop()
        while True:
            try:
                async for batch in source.batches(self._ready):
                    self.publish(batch)
                    if self._idle(loop):
                        return
                if self._idle(loop):
                    return
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("job event stream interrupted; reconnecting")
            # Whatever happened between the break and the reconnect is lost for the live
            # subscribers: they go back through Last-Event-ID replay.
            for sub in list(self.subscribers):
                sub.cut_loose()
            self._ready.clear()
            await asyncio.sleep(1)

    def _idle(self, loop: asyncio.AbstractEventLoop) -> bool:
        if self.subscribers:
            self._idle_since = None
            return False
        if self._idle_since is None:
            self._idle_since = loop.time()
        return loop.time() - self._idle_since >= idle_seconds()


def idle_seconds() -> float:
    return float(getattr(settings, "STREAMS_IDLE_SECONDS", 30))


def make_source() -> Source:
    if getattr(settings, "REDIS_URL", ""):
        return relay.RedisSource()
    return pgsource.PostgresSource()


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def get_hub() -> Hub:
    """This process's hub (one per event loop: the web process has one; tests start several)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = Hub()
    return hub
