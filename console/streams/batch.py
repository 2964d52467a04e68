"""A batch of job events as the streams pass it around, and what produces batches.

The hub consumes batches; its sources (``console.streams.pgsource``, ``console.streams.relay``)
produce them. Both sides import this module, and it imports neither.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from console.streams.serialize import End, StreamEvent


@dataclass
class Batch:
    """Events and ends of one load. ``encoded`` memoizes each event's JSON text and is
    shared by the per-subscriber slices of a batch: an event is serialized once per
    process and kind of reader (staff, who see tracebacks, or not), not once per client."""

    events: list[StreamEvent]
    ends: list[End]
    encoded: dict[tuple[int, bool], str] = field(default_factory=dict)

    def json(self, event: StreamEvent, staff: bool) -> str:
        key = (event.id, staff)
        text = self.encoded.get(key)
        if text is None:
            text = self.encoded[key] = json.dumps(event.data_for(staff), separators=(",", ":"))
        return text


class Source(Protocol):
    """Where a hub's batches come from: ``batches`` sets ``ready`` once every event
    committed from then on will reach it, then yields a batch at least every tick (an
    empty one if nothing happened)."""

    # Not ``async def``: an implementation is an async generator, called without await.
    def batches(self, ready: asyncio.Event) -> AsyncIterator[Batch]: ...
