"""What the console's tests build and read besides the engine's objects
(``tests/jobs/builders.py``): a stream test's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from console.streams.hub import get_hub

T = TypeVar("T")


def run_streams(main: Callable[[], Awaitable[T]]) -> T:
    """``main`` on a fresh event loop, bounded to 20 s, and the stream hub it started
    stopped afterwards (each test's loop is its own)."""

    async def bounded() -> T:
        try:
            return await asyncio.wait_for(main(), 20)
        finally:
            await get_hub().stop()

    return asyncio.run(bounded())
