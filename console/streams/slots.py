"""How many event streams one user holds open, counted across every web process.

An open stream (SSE or WebSocket) holds a connection, a hub subscription and a task in
its web process for as long as the client wants: one member held 300 of them. Each
stream therefore takes one of its user's ``STREAMS_MAX_PER_USER`` slots, and a user with
none free is refused (SSE: 429; WebSocket: close code 4429), naming the cap.

A slot is a key in the shared cache the throttles use (Redis in production, files on a
one-machine setup), ``streams_user_<id>_<n>``, taken with ``cache.add`` (only if absent:
atomic on Redis; on files two processes may both win one at the same instant, a stream
over the cap for a lease at most). The key expires ``lease_seconds()`` after its last
renewal, and an open stream renews it every keepalive: the slots of a process that
dies are free again within a lease; a stream that closes frees its slot at once.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache

DEFAULT_MAX_PER_USER = 20
LEASES_PER_RENEWAL = 3  # a slot outlives two missed renewals


def max_per_user() -> int:
    return int(getattr(settings, "STREAMS_MAX_PER_USER", DEFAULT_MAX_PER_USER))


def renew_every() -> float:
    """How often an open stream renews its slot: it wakes at least this often anyway
    (its keepalive)."""
    return float(getattr(settings, "STREAMS_KEEPALIVE_SECONDS", 15))


def lease_seconds() -> float:
    return renew_every() * LEASES_PER_RENEWAL


def refusal(cap: int) -> str:
    return (
        f"You have {cap} event streams open, the most one user may "
        f"(STREAMS_MAX_PER_USER): close one to open another."
    )


@dataclass
class Slot:
    """One stream's slot: its cache key, and the token that says the key is still ours."""

    key: str
    token: str
    renewed: float = field(default_factory=time.monotonic)

    async def renew(self) -> None:
        """Extends the lease when a renewal is due. A slot lost meanwhile (expired after
        missed renewals, perhaps taken by another stream) is taken again if free."""
        if time.monotonic() - self.renewed < renew_every():
            return
        self.renewed = time.monotonic()
        if await cache.aget(self.key) == self.token:
            await cache.atouch(self.key, lease_seconds())
        else:
            await cache.aadd(self.key, self.token, lease_seconds())

    def release(self) -> None:
        """Frees the slot (synchronous: called from a response's ``close``, which Django
        runs in a thread)."""
        if cache.get(self.key) == self.token:
            cache.delete(self.key)

    async def arelease(self) -> None:
        if await cache.aget(self.key) == self.token:
            await cache.adelete(self.key)


async def take(user_id: int) -> Slot | None:
    """A free slot of the user's, now held; None when all ``max_per_user()`` are."""
    token = uuid.uuid4().hex
    cap = max_per_user()
    # From a random slot on: with k of n slots held, a free one is found in about
    # n / (n - k) tries, not k.
    first = random.randrange(cap) if cap > 0 else 0
    for number in ((first + step) % cap for step in range(cap)):
        key = f"streams_user_{user_id}_{number}"
        if await cache.aadd(key, token, lease_seconds()):
            return Slot(key, token)
    return None
