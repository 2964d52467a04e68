"""The live streams' source follows ``jobs_jobevent`` by id (``console.streams.pgsource``):
rows that commit out of id order still stream, each once, and the ids of rolled-back
inserts are given up after a bound without holding later rows back.

The source runs against the real database; other sessions' transactions are opened on
connections of their own, so that a test decides when each one commits. Each test reads
batches straight from the source (each read of the table is one batch), with the
follower's clock in the test's hands.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest

from console.streams import pgsource
from console.streams.batch import Batch
from console.streams.follow import HOLE_SECONDS
from console.streams.hub import Filter, get_hub
from tests.console.builders import run_streams
from tests.support.base import make_job

pytestmark = pytest.mark.django_db(transaction=True)

INSERT = (
    "INSERT INTO jobs_jobevent (job_id, at, kind, attempt, worker) "
    "VALUES (%s, now(), 'released', 0, '') RETURNING id"
)


class Writer:
    """A session of its own that inserts history rows, in a transaction it leaves open
    (``open=True``) until the test commits or rolls it back."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], job: int) -> None:
        self.conn, self.job = conn, job

    async def insert(self, open: bool = False) -> int:
        if open:
            await self.conn.execute("BEGIN")
        row = await (await self.conn.execute(INSERT, [self.job])).fetchone()
        assert row is not None
        return int(row[0])

    async def end(self, commit: bool) -> None:
        await self.conn.execute("COMMIT" if commit else "ROLLBACK")


@contextlib.asynccontextmanager
async def writer(job: int) -> AsyncIterator[Writer]:
    conn = await pgsource.connect("test writer")
    try:
        yield Writer(conn, job)
    finally:
        await conn.close()


class Reader:
    """The source's batches, one read of the table at a time, and every id they held."""

    def __init__(self, source: pgsource.PostgresSource) -> None:
        self.source = source
        self.batches = source.batches(asyncio.Event())
        self.sent: list[int] = []

    async def read(self) -> list[int]:
        batch: Batch = await anext(self.batches)
        ids = [event.id for event in batch.events]
        self.sent += ids
        return ids

    async def until(self, *wanted: int) -> list[int]:
        """Reads until every id of ``wanted`` came; what came meanwhile."""
        got: list[int] = []
        while not set(wanted) <= set(got):
            got += await self.read()
        return got

    @property
    def holes(self) -> set[int]:
        assert self.source.follower is not None
        return set(self.source.follower.holes)


def follow(main: Callable[[Reader, Callable[[float], None]], Any]) -> Any:
    """``main(reader, advance)`` on a started source whose clock moves only by ``advance``."""
    now = [1000.0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    async def run() -> Any:
        reader = Reader(pgsource.PostgresSource(clock=lambda: now[0]))
        try:
            await reader.read()  # started: following from the newest row
            return await main(reader, advance)
        finally:
            await reader.batches.aclose()

    return run_streams(run)


def test_a_row_committed_after_a_larger_id_was_sent_is_still_sent_once():
    job = make_job("tests.noop").pk

    async def main(reader: Reader, advance: Callable[[float], None]) -> tuple[list[int], ...]:
        async with writer(job) as slow, writer(job) as quick:
            early = await slow.insert(open=True)
            late = await quick.insert()  # a larger id, committed first
            first = await reader.until(late)
            assert early in reader.holes
            await slow.end(commit=True)
            second = await reader.until(early)
            after = await quick.insert()
            third = await reader.until(after)
        return (early, late, after), (first, second, third), (reader.sent,)

    (early, late, after), (first, second, third), (sent,) = follow(main)
    assert early < late
    assert (first, second, third) == ([late], [early], [after])
    assert sent == [late, early, after]  # each id once


def test_a_rolled_back_insert_is_given_up_after_the_bound_without_holding_later_rows():
    job = make_job("tests.noop").pk

    async def main(reader: Reader, advance: Callable[[float], None]) -> dict[str, Any]:
        async with writer(job) as doomed, writer(job) as others:
            lost = await doomed.insert(open=True)
            first = await others.insert()
            got = {"first": await reader.until(first)}
            second = await others.insert()  # while the hole is open
            got["second"] = await reader.until(second)
            await doomed.end(commit=False)
            advance(HOLE_SECONDS - 0.5)
            await reader.read()
            got["held just before the bound"] = lost in reader.holes
            advance(0.5)
            await reader.read()
            got["held at the bound"] = lost in reader.holes
            got["ids"] = (lost, first, second)
        return got

    got = follow(main)
    lost, first, second = got["ids"]
    assert lost < first < second
    assert (got["first"], got["second"]) == ([first], [second])
    assert got["held just before the bound"] and not got["held at the bound"]


def test_a_transaction_open_when_the_source_starts_streams_its_row_when_it_commits():
    """The source starts after the newest row, as LISTEN did; a row below it that was not
    yet committed is new too."""
    job = make_job("tests.noop").pk

    async def main() -> tuple[int, int, list[int]]:
        async with writer(job) as slow, writer(job) as quick:
            early = await slow.insert(open=True)
            late = await quick.insert()  # committed before the start: not streamed
            reader = Reader(pgsource.PostgresSource())
            try:
                await reader.read()
                await slow.end(commit=True)
                await reader.until(early)
                return early, late, reader.sent
            finally:
                await reader.batches.aclose()

    early, late, sent = run_streams(main)
    assert early < late and sent == [early]


def test_the_hub_delivers_a_late_commit_to_its_subscribers():
    job = make_job("tests.noop").pk

    async def main() -> tuple[list[int], list[int]]:
        sub = await get_hub().subscribe(Filter(jobs={job}), True)
        got: list[int] = []
        async with writer(job) as slow, writer(job) as quick:
            early = await slow.insert(open=True)
            late = await quick.insert()
            while late not in got:
                got += [e.id for e in (await sub.get(timeout=10) or Batch([], [])).events]
            await slow.end(commit=True)
            while early not in got:
                got += [e.id for e in (await sub.get(timeout=10) or Batch([], [])).events]
        return [late, early], got

    expected, got = run_streams(main)
    assert got == expected
