"""``/ws/jobs/``: one WebSocket, many subscriptions (jobs, pipelines, job types).

Messages are JSON. In: ``{"subscribe": {"job": id}}`` (or ``pipeline``, ``type``,
``jobs``) and the same with ``unsubscribe``. Out: ``{"subscribed": ...}`` /
``{"unsubscribed": ...}``, ``{"error": ...}``, and ``{"event": <contract JSON>}``. An
anonymous connection is closed with code 4401; a user's connection beyond their
``STREAMS_MAX_PER_USER`` open streams (SSE ones included, console/streams/slots.py) gets an
``{"error": ..., "limit": <cap>}`` naming the cap and is closed with code 4429. A job
or pipeline outside the user's tenant answers the same error as an unknown one;
``{"jobs": [...]}`` subscribes to the ids the user may see and names the others in the
acknowledgement's ``"refused"``. A message that is not JSON, is nested too deeply, or
holds a string PostgreSQL cannot store is answered with an ``{"error": ...}`` naming why.

There is no replay here: a consumer the hub cut loose (too slow, or the source was
interrupted: events may have been missed) is closed with code 4000 (``LAGGED``); the
page's script (console/static/console/live.js) reconnects and refreshes what it shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.streams import access, slots
from console.streams.hub import Filter, Lagged, Subscription, get_hub
from jobs.arguments import MAX_JSON_DEPTH, json_depth, may_not_store, stored_text_problem
from jobs.redaction import sees_tracebacks

UNAUTHENTICATED = 4401
TOO_MANY_STREAMS = 4429  # the user holds STREAMS_MAX_PER_USER streams already
LAGGED = 4000  # events may have been missed: reconnect, then refresh (live.js does both)


class JobEventsConsumer(AsyncJsonWebsocketConsumer):
    # Only the hub feeds this consumer. With the default alias Channels would open the
    # channel layer for every process that takes a connection (channels-postgres: a pool
    # of about four connections and a LISTEN; channels_redis: a Redis channel) for nothing.
    # An alias absent from CHANNEL_LAYERS makes get_channel_layer() return None, so none
    # is opened.
    channel_layer_alias = "jobs-streams-no-layer"
    sub: Subscription | None = None
    pump: asyncio.Task[None] | None = None
    slot: slots.Slot | None = None
    staff = False  # whether failure messages keep their traceback (jobs.redaction)

    async def connect(self) -> None:
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        self.slot = await slots.take(user.pk)
        if self.slot is None:
            cap = slots.max_per_user()
            await self.send_json({"error": slots.refusal(cap), "limit": cap})
            await self.close(code=TOO_MANY_STREAMS)
            return
        scope = await access.in_slot(access.user_scope, user)
        self.staff = sees_tracebacks(user)
        self.sub = await get_hub().subscribe(Filter(), scope)
        self.pump = asyncio.ensure_future(self._pump(self.sub))

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pump
        if self.sub is not None:
            get_hub().unsubscribe(self.sub)
        if self.slot is not None:
            await self.slot.arelease()

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """A message is JSON read by the API's rules: an answer naming what is wrong with
        it, rather than a consumer that dies on it."""
        try:
            content = message_json(text_data)
        except ValueError as exc:
            await self.send_json({"error": str(exc)})
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.sub is None:
            return
        if not isinstance(content, dict) or len(content) != 1:
            await self.send_json({"error": 'send {"subscribe": {...}} or {"unsubscribe": {...}}'})
            return
        ((verb, what),) = content.items()
        if verb not in ("subscribe", "unsubscribe"):
            await self.send_json({"error": f"unknown message {verb!r}"})
            return
        try:
            kind, keys = parse_target(what)
        except ValueError as exc:
            await self.send_json({"error": str(exc)})
            return
        if verb == "subscribe":
            await self._subscribe(kind, keys, what)
        else:
            target_set(self.sub.filter, kind).difference_update(keys)
            await self.send_json({"unsubscribed": what})

    async def _subscribe(self, kind: str, keys: list[Any], what: dict[str, Any]) -> None:
        assert self.sub is not None
        if kind == "job" and "jobs" in what:
            allowed = await access.in_slot(access.visible_jobs, self.sub.scope, keys)
            self.sub.filter.jobs.update(allowed)
            refused = [key for key in dict.fromkeys(keys) if key not in allowed]
            await self.send_json({"subscribed": {"jobs": allowed}, "refused": refused})
            return
        if kind in ("job", "pipeline"):
            (key,) = keys
            if not await access.in_slot(access.visible, self.sub.scope, kind, key):
                await self.send_json({"error": f"{kind} {key} not found"})
                return
        target_set(self.sub.filter, kind).update(keys)
        await self.send_json({"subscribed": what})

    async def _pump(self, sub: Subscription) -> None:
        while True:
            if self.slot is not None:
                await self.slot.renew()
            try:
                batch = await sub.get(timeout=slots.renew_every())
            except Lagged:
                get_hub().unsubscribe(sub)
                await self.close(code=LAGGED)
                return
            for event in batch.events if batch else ():
                await self.send_json({"event": event.data_for(self.staff)})


def message_json(text: str | None) -> Any:
    """A client's message, decoded as the API decodes request bodies: of bounded depth,
    and without a NUL character or lone surrogate in any string; ValueError naming the
    problem otherwise."""
    if text is None:
        raise ValueError("messages are JSON text")
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"the message is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"the message is not JSON: {exc}") from None
    problem = stored_text_problem(content, "the message") if may_not_store(text) else ""
    if problem:
        raise ValueError(problem)
    return content


def parse_target(what: Any) -> tuple[str, list[Any]]:
    """("job"|"pipeline"|"type", keys) from ``{"job": 1}``, ``{"jobs": [1, 2]}``..."""
    if not isinstance(what, dict) or len(what) != 1:
        raise ValueError('name one of "job", "jobs", "pipeline" or "type"')
    ((name, value),) = what.items()
    if name == "job" or name == "jobs":
        values = value if name == "jobs" else [value]
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values
        ):
            raise ValueError(f'"{name}" takes job ids (integers)')
        return "job", values
    if name == "pipeline":
        try:
            return "pipeline", [str(uuid.UUID(str(value)))]
        except ValueError:
            raise ValueError('"pipeline" takes a UUID') from None
    if name == "type":
        if not isinstance(value, str) or not value:
            raise ValueError('"type" takes a job type name')
        return "type", [value]
    raise ValueError(f"cannot subscribe to {name!r}")


def target_set(filter: Filter, kind: str) -> set[Any]:
    targets: dict[str, set[Any]] = {"job": filter.jobs, "pipeline": filter.pipelines, "type": filter.types}
    return targets[kind]
