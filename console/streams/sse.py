"""Server-sent events of one job or one pipeline (the contract is in docs/streams.md).

An async Django view returning a ``StreamingHttpResponse`` over an async generator: under
the ASGI server (uvicorn) it holds no thread and no database connection while it waits (the hub queries);
Django cancels the generator when the client goes away. Each stream holds one of its
reader's ``STREAMS_MAX_PER_USER`` slots (console/streams/slots.py) until Django closes the
response; a reader with none free gets 429 naming the cap.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from rest_framework.exceptions import Throttled

from console.streams import access, slots
from console.streams.hub import Filter, Lagged, Subscription, get_hub
from console.streams.serialize import End, StreamEvent


def keepalive_seconds() -> float:
    return float(getattr(settings, "STREAMS_KEEPALIVE_SECONDS", 15))


async def job_events(request: HttpRequest, pk: int) -> HttpResponseBase:
    return await _stream(request, "job", pk)


async def pipeline_events(request: HttpRequest, pipeline: uuid.UUID) -> HttpResponseBase:
    return await _stream(request, "pipeline", str(pipeline))


def last_event_id(request: HttpRequest) -> int | None:
    """The client's Last-Event-ID (header, or ``?last_event_id=``); ValueError if bad."""
    raw = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id")
    if raw is None or raw == "":
        return None
    value = int(raw)
    if value < 0:
        raise ValueError(raw)
    return value


async def _stream(request: HttpRequest, kind: str, key: Any) -> HttpResponseBase:
    try:
        after = last_event_id(request)
    except ValueError:
        return JsonResponse({"detail": "Last-Event-ID must be a non-negative event id."}, status=400)
    try:
        status, scope, staff, user_id = await access.in_slot(access.open_stream, request, kind, key)
    except Throttled as exc:  # too many wrong tokens from this address
        response = JsonResponse({"detail": str(exc.detail)}, status=429)
        # DRF sets ``wait`` on the exception; its stubs leave the attribute out.
        response["Retry-After"] = str(math.ceil(exc.wait or 1))  # type: ignore[attr-defined]
        return response
    if status == 401:
        response = JsonResponse({"detail": "Authentication credentials were not provided."}, status=401)
        response["WWW-Authenticate"] = "Token"
        return response
    if status == 404:
        return JsonResponse({"detail": "Not found."}, status=404)
    slot = await slots.take(user_id)
    if slot is None:
        cap = slots.max_per_user()
        response = JsonResponse({"detail": slots.refusal(cap), "limit": cap}, status=429)
        response["Retry-After"] = str(math.ceil(slots.renew_every()))
        return response
    stream = EventStream(_events(scope, staff, kind, key, after, slot), slot)
    stream["Cache-Control"] = "no-cache"
    stream["X-Accel-Buffering"] = "no"  # no buffering in a front proxy
    return stream


class EventStream(StreamingHttpResponse):
    """An event stream that holds one of its reader's stream slots until Django closes
    the response: when it ends, when the client goes away, and also when the stream was
    cancelled before its first byte (its generator then never runs)."""

    def __init__(self, events: AsyncIterator[str], slot: slots.Slot) -> None:
        super().__init__(events, content_type="text/event-stream")
        self.slot = slot

    def close(self) -> None:
        try:
            self.slot.release()
        finally:
            super().close()


async def _events(
    scope: int | bool, staff: bool, kind: str, key: Any, after: int | None, slot: slots.Slot
) -> AsyncIterator[str]:
    """Replay (when asked), then live events until the end; ``staff`` readers get the
    tracebacks in failure messages (``jobs.redaction``).

    The hub subscription is taken here, inside the ``try``, not in the view: a request
    cancelled before its body starts never runs the generator, so it holds nothing. It is
    taken before the replay, so that nothing falls between the two (the overlap is sent
    once: ``replayed`` drops the live copies).
    """
    hub = get_hub()
    sub: Subscription | None = None
    try:
        stream_filter = Filter(jobs={key}) if kind == "job" else Filter(pipelines={key})
        sub = await hub.subscribe(stream_filter, scope)
        replayed: set[int] = set()
        last = after or 0
        if after is None:  # live only: a finished job or pipeline ends at once
            end = await access.in_slot(access.finished, scope, kind, key)
            if end is not None:
                yield end_frame(end)
                return
        # A first byte as soon as the stream is subscribed: a client should know it is
        # connected before the first event (and some ASGI servers hold the response
        # headers back until the first body bytes). Every event committed from here on
        # reaches this stream.
        yield ": open\n\n"
        if after is not None:
            async for event in _replay(scope, kind, key, after):
                await slot.renew()  # a long replay holds its slot too (a clock check)
                if not sub.allows(event):
                    continue
                replayed.add(event.id)
                last = max(last, event.id)
                yield frame(event, json.dumps(event.data_for(staff), separators=(",", ":")))
            end = await access.in_slot(access.finished, scope, kind, key)
            if end is not None and end.last_event_id <= last:
                yield end_frame(end)
                return
        async for text in _live(sub, staff, replayed, last, slot):
            yield text
    finally:
        if sub is not None:
            hub.unsubscribe(sub)


async def _replay(scope: int | bool, kind: str, key: Any, after: int) -> AsyncIterator[StreamEvent]:
    overlap = True  # the first page only: later pages continue from the previous one
    while True:
        page = await access.in_slot(access.replay_page, scope, kind, key, after, overlap)
        for event in page:
            yield event
        if len(page) < access.REPLAY_PAGE:
            return
        after, overlap = page[-1].id, False


async def _live(
    sub: Subscription, staff: bool, replayed: set[int], last: int, slot: slots.Slot
) -> AsyncIterator[str]:
    while True:
        await slot.renew()
        try:
            batch = await sub.get(keepalive_seconds())
        except Lagged:
            return  # the client reconnects with Last-Event-ID and replays what it missed
        if batch is None:
            yield ": keepalive\n\n"
            continue
        fresh = [event for event in batch.events if event.id not in replayed] if replayed else batch.events
        if fresh:
            last = max(last, *(event.id for event in fresh))
        ends = [end for end in batch.ends if end.last_event_id <= last]
        # One write per wake-up (``get`` merges whatever queued meanwhile). Measured: Django's
        # streaming wrapper adds about 3 us a write over a raw ASGI send; the cost of a write
        # is the server's (uvicorn's) and the task wake-up, so this stays a Django view.
        text = "".join([frame(event, batch.json(event, staff)) for event in fresh]) + (
            end_frame(ends[0]) if ends else ""
        )
        if text:
            yield text
        if ends:
            return


def frame(event: StreamEvent, data: str) -> str:
    return f"id: {event.id}\nevent: job\ndata: {data}\n\n"


def end_frame(end: End) -> str:
    return f"event: end\ndata: {json.dumps(end.data(), separators=(',', ':'))}\n\n"
