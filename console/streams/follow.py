"""Which job history ids a stream source reads next, and which ones it skipped.

Ids are drawn from the sequence at insert and become visible at commit, and commits do
not come in id order: when a read past id 6 returns 7 and 9, id 8 may belong to a
transaction still open, or to one that rolled back, or be a number the sequence never
handed out. A follower that only moved past the newest id it saw would lose 8 if it
committed later. ``Follower`` keeps such holes and has them read again until they show
up or ``HOLE_SECONDS`` pass, and hands out each id at most once.

Pure bookkeeping, with the time passed in; ``console.streams.pgsource`` does the reading.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

logger = logging.getLogger(__name__)

# How long a skipped id is read again. An open transaction that commits its history row
# later than this after a larger id was read is not streamed live; a rollback's or the
# sequence's gap is given up after as long. Matches the replay's default overlap
# (STREAMS_REPLAY_OVERLAP_SECONDS), which resends rows committed that late after
# Last-Event-ID: the two cover the same late commits.
HOLE_SECONDS = 5.0
# Holes kept at most: each is read again every interval (one index range scan per run
# of consecutive holes). Only a transaction holding thousands of new ids open while later
# ones commit (a large bulk insert) comes near it; past it the oldest holes are dropped.
MAX_HOLES = 10_000


class Follower:
    """The newest id read (``last``) and the holes below it, each with when it was first
    missed.

    Holes are always added above every hole already kept (they lie between the previous
    ``last`` and a newer one), so the dict's order is both id order and age order."""

    def __init__(
        self, last: int = 0, *, hole_seconds: float = HOLE_SECONDS, max_holes: int = MAX_HOLES
    ) -> None:
        self.last = last
        self.hole_seconds = hole_seconds
        self.max_holes = max_holes
        self.holes: dict[int, float] = {}

    @classmethod
    def starting_after(
        cls,
        newest: Sequence[int],
        now: float,
        *,
        hole_seconds: float = HOLE_SECONDS,
        max_holes: int = MAX_HOLES,
    ) -> Follower:
        """A follower at the newest row that sends none of ``newest`` (the ids of the
        newest ``max_holes`` rows, ascending; none: an empty table), and keeps the ids of
        the ``max_holes`` before it that are missing as holes: a transaction still open
        at the start commits its rows later, and to a stream started before, they are new."""
        follower = cls(hole_seconds=hole_seconds, max_holes=max_holes)
        if newest:
            follower.last = max(0, newest[-1] - max_holes)
            follower.take((), [i for i in newest if i > follower.last], now)
        return follower

    def ranges(self) -> list[tuple[int, int]]:
        """The holes as runs of consecutive ids, ``(lo, hi)`` inclusive, ascending."""
        runs: list[tuple[int, int]] = []
        for hole in sorted(self.holes):
            if runs and runs[-1][1] == hole - 1:
                runs[-1] = (runs[-1][0], hole)
            else:
                runs.append((hole, hole))
        return runs

    def take(self, found: Iterable[int], after: Sequence[int], now: float) -> list[int]:
        """The ids to send, ascending, of those just read: ``found`` among the holes, and
        ``after`` past ``last`` (ascending, as ``ORDER BY id`` returns them). The ids
        ``after`` skipped become holes; holes older than ``hole_seconds`` are given up."""
        filled = sorted(hole for hole in found if self.holes.pop(hole, None) is not None)
        fresh = []
        for event_id in after:
            if event_id <= self.last:
                continue
            self._skip(self.last + 1, event_id, now)
            fresh.append(event_id)
            self.last = event_id
        self._expire(now)
        return filled + fresh

    def _skip(self, lo: int, hi: int, now: float) -> None:
        """Ids ``lo`` to ``hi - 1`` were not visible: holes."""
        if hi - lo > self.max_holes:
            logger.warning(
                "job stream: %d job history ids skipped at once; following the newest %d",
                hi - lo,
                self.max_holes,
                extra={"first_id": lo, "last_id": hi - 1},
            )
            lo = hi - self.max_holes
        for hole in range(lo, hi):
            self.holes[hole] = now

    def _expire(self, now: float) -> None:
        expired = []
        for hole, since in self.holes.items():  # oldest first
            if now - since < self.hole_seconds:
                break
            expired.append(hole)
        for hole in expired:
            del self.holes[hole]
        if expired:
            logger.debug(
                "job stream: gave up %d job history ids not committed within %ss",
                len(expired),
                self.hole_seconds,
                extra={"ids": expired[:20]},
            )
        excess = len(self.holes) - self.max_holes
        if excess > 0:
            dropped = list(self.holes)[:excess]
            for hole in dropped:
                del self.holes[hole]
            logger.warning(
                "job stream: over %d job history ids missing; no longer waiting for the %d oldest",
                self.max_holes,
                excess,
                extra={"first_id": dropped[0], "last_id": dropped[-1]},
            )
