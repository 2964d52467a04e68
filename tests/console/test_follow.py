"""The stream follower's bookkeeping (``console.streams.follow``): ids commit out of order,
so the ids a read skips are read again for a while; none is handed out twice, and every
row that commits within the bound of being skipped is handed out.

The state machine plays a database: inserts draw ids and commit or roll back in any
order, the sequence skips numbers, time passes, and reads return what is visible.
"""

from __future__ import annotations

import logging

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from console.streams.follow import Follower

HOLE_SECONDS = 5.0


def test_a_read_hands_out_the_new_ids_and_keeps_the_skipped_ones():
    follower = Follower(last=10)
    assert follower.take([], [11, 14, 15], now=0.0) == [11, 14, 15]
    assert (follower.last, list(follower.holes)) == (15, [12, 13])
    assert follower.ranges() == [(12, 13)]


def test_a_skipped_id_that_commits_later_is_handed_out_once():
    follower = Follower(last=10)
    follower.take([], [11, 13], now=0.0)
    assert follower.take([12], [14], now=1.0) == [12, 14]
    assert follower.take([12], [], now=2.0) == []  # already handed out
    assert follower.holes == {}


def test_a_hole_is_given_up_after_the_bound_and_not_before(caplog):
    follower = Follower(last=0, hole_seconds=HOLE_SECONDS)
    follower.take([], [2], now=100.0)
    assert follower.take([], [3], now=100.0 + HOLE_SECONDS - 0.001) == [3]  # not held up by the hole
    assert list(follower.holes) == [1]
    with caplog.at_level(logging.DEBUG, logger="console.streams.follow"):
        follower.take([], [], now=100.0 + HOLE_SECONDS)
    assert follower.holes == {}
    assert "gave up 1 job history ids" in caplog.text


def test_past_the_cap_the_oldest_holes_are_dropped_with_a_warning(caplog):
    follower = Follower(last=0, max_holes=3)
    follower.take([], [3], now=0.0)
    with caplog.at_level(logging.WARNING, logger="console.streams.follow"):
        follower.take([], [6], now=1.0)
    assert list(follower.holes) == [2, 4, 5]
    assert "no longer waiting for the 1 oldest" in caplog.text


def test_a_jump_wider_than_the_cap_keeps_only_the_newest_holes(caplog):
    follower = Follower(last=0, max_holes=3)
    with caplog.at_level(logging.WARNING, logger="console.streams.follow"):
        assert follower.take([], [1_000_000], now=0.0) == [1_000_000]
    assert list(follower.holes) == [999_997, 999_998, 999_999]
    assert "999999 job history ids skipped at once" in caplog.text


def test_a_follower_starts_after_the_newest_row_with_the_missing_ids_as_holes():
    follower = Follower.starting_after([7, 8, 10, 12], now=0.0, max_holes=10)
    assert follower.last == 12
    assert follower.ranges() == [(3, 6), (9, 9), (11, 11)]  # the 10 ids up to 12
    assert Follower.starting_after([4, 6], now=0.0).ranges() == [(1, 3), (5, 5)]
    assert Follower.starting_after([], now=0.0).last == 0  # an empty table


def test_runs_of_holes_are_merged():
    follower = Follower(last=0)
    follower.take([], [4, 5, 9], now=0.0)
    assert follower.ranges() == [(1, 3), (6, 8)]


class History(RuleBasedStateMachine):
    """``jobs_jobevent`` as concurrent writers and a follower see it."""

    def __init__(self) -> None:
        super().__init__()
        self.follower = Follower(hole_seconds=HOLE_SECONDS, max_holes=10_000)
        self.now = 0.0
        self.next_id = 1
        self.open: list[list[int]] = []  # each open transaction's ids
        self.committed: dict[int, float] = {}  # id: when it became visible
        self.missed: dict[int, float] = {}  # id: when a read first went past it unseen
        self.sent: list[int] = []

    @rule(rows=st.integers(1, 4))
    def insert(self, rows: int) -> None:
        self.open.append(list(range(self.next_id, self.next_id + rows)))
        self.next_id += rows

    @rule(skipped=st.integers(1, 3))
    def sequence_gap(self, skipped: int) -> None:
        self.next_id += skipped

    @precondition(lambda self: self.open)
    @rule(data=st.data(), commit=st.booleans())
    def end_a_transaction(self, data: st.DataObject, commit: bool) -> None:
        ids = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        if commit:
            self.committed.update((i, self.now) for i in ids)

    @rule(seconds=st.sampled_from([0.1, 1.0, 2.5, HOLE_SECONDS]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule(limit=st.integers(1, 6))
    def read(self, limit: int) -> None:
        """What the two queries return: the visible holes, the visible ids past ``last``."""
        visible = self.committed
        found = [i for lo, hi in self.follower.ranges() for i in range(lo, hi + 1) if i in visible]
        after = sorted(i for i in visible if i > self.follower.last)[:limit]
        if after:
            for i in range(self.follower.last + 1, after[-1]):
                if i not in visible:
                    self.missed.setdefault(i, self.now)
        got = self.follower.take(found, after, self.now)
        assert got == sorted(got)
        self.sent += got

    @invariant()
    def no_id_is_sent_twice_and_only_committed_ones(self) -> None:
        assert len(self.sent) == len(set(self.sent))
        assert set(self.sent) <= set(self.committed)

    @invariant()
    def the_ranges_are_the_holes_below_the_newest_id(self) -> None:
        runs = self.follower.ranges()
        assert [i for lo, hi in runs for i in range(lo, hi + 1)] == sorted(self.follower.holes)
        assert all(hole < self.follower.last for hole in self.follower.holes)
        assert not set(self.follower.holes) & set(self.sent)

    @invariant()
    def a_skipped_id_is_read_again_until_the_bound(self) -> None:
        for i, since in self.missed.items():
            if i not in self.sent and self.now - since < HOLE_SECONDS:
                assert i in self.follower.holes, i

    def teardown(self) -> None:
        """Once the reads catch up, every committed id went out unless it committed at
        least ``HOLE_SECONDS`` after a read first went past it."""
        for _ in range(len(self.committed) + 1):  # at most one read per row, and an empty one
            before = len(self.sent)
            self.read(limit=100)
            if len(self.sent) == before:
                break
        assert len(self.sent) == len(set(self.sent))
        for i in set(self.committed) - set(self.sent):
            assert i in self.missed and self.committed[i] - self.missed[i] >= HOLE_SECONDS, i


TestHistory = History.TestCase
TestHistory.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
