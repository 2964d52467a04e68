"""The dashboard's time series and job lists: per type and bucket, computed by one query
per chart family, adding up to the window's figures; the oldest due and the stuck jobs."""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import dashboard
from jobs import engine
from jobs.models import Job
from jobs.testing import T0
from tests.support.base import make_job

pytestmark = pytest.mark.django_db

FIVE_MINUTES = timedelta(minutes=5)


def ran_for(clock, seconds: float, name: str = "tests.noop", *, fail: bool = False) -> Job:
    """Enqueue a job, claim it, let ``seconds`` pass on the clock, then finish it."""
    job = make_job(name)
    batch = engine.claim("w1", limit=1, types=[name])
    assert [claimed.pk for claimed in batch.jobs] == [job.pk]
    clock.advance(seconds)
    if fail:
        engine.fail(batch.jobs[0], batch.token, "boom", permanent=True)
    else:
        engine.complete(batch.jobs[0], batch.token)
    job.refresh_from_db()
    return job


def move_to(clock, at) -> None:
    clock.advance((at - clock.now()).total_seconds())


def retried(clock) -> None:
    make_job("tests.flaky", {"succeed_on": 2})
    batch = engine.claim("w1", limit=1, types=["tests.flaky"])
    engine.fail(batch.jobs[0], batch.token, "flaky attempt 1")  # a retry_scheduled event


def rescued(clock) -> Job:
    crash = make_job("tests.crash")
    engine.claim("w1", limit=1, types=["tests.crash"])
    clock.advance(7)  # past the 6 s lease
    crash.refresh_from_db()
    assert engine.rescue(crash) == Job.State.PENDING
    return crash


@pytest.fixture
def hour(clock):
    """An hour from T0 to T0 + 60 min (a one-hour window ends there) of noop jobs in
    several five-minute buckets, one finished before it, retries and a rescue."""
    clock.advance(-600)
    ran_for(clock, 9)  # before the window
    move_to(clock, T0)
    done = [ran_for(clock, seconds) for seconds in (3, 5, 8)]  # bucket 0
    move_to(clock, T0 + timedelta(minutes=12))
    done += [ran_for(clock, seconds) for seconds in (10, 20, 40, 1)]  # bucket 2
    done.append(ran_for(clock, 30, fail=True))  # bucket 2
    move_to(clock, T0 + timedelta(minutes=31))
    retried(clock)  # bucket 6
    move_to(clock, T0 + timedelta(minutes=47))
    retried(clock)
    rescued(clock)  # bucket 9
    move_to(clock, T0 + timedelta(hours=1) - timedelta(seconds=4))
    done.append(ran_for(clock, 4))  # finishes exactly at the window's end: the last bucket
    assert clock.now() == T0 + timedelta(hours=1)
    return done


def expected_buckets(jobs: list[Job]) -> dict[int, list[Job]]:
    by_bucket: dict[int, list[Job]] = defaultdict(list)
    for job in jobs:
        index = min((job.finished_at - T0) // FIVE_MINUTES, 11)
        by_bucket[index].append(job)
    return by_bucket


def percentiles(jobs: list[Job]) -> tuple[float, float]:
    """p50 and p95 of the durations, linear interpolation (PostgreSQL's percentile_cont)."""
    seconds = sorted(job.duration_seconds for job in jobs)
    if len(seconds) == 1:
        return seconds[0], seconds[0]
    return statistics.median(seconds), statistics.quantiles(seconds, n=100, method="inclusive")[94]


def test_the_series_buckets_match_statistics_computed_from_the_jobs(hour):
    board = dashboard.board("1h")
    noop = next(series for series in board.series if series.type == "tests.noop")

    assert board.buckets.starts == [T0 + index * FIVE_MINUTES for index in range(12)]
    expected = expected_buckets(hour)
    assert set(expected) == {0, 2, 11}
    for index in range(12):
        jobs = expected.get(index, [])
        assert noop.finished[index] == len(jobs), index
        assert noop.failed[index] == sum(job.state == Job.State.FAILED for job in jobs), index
        if jobs:
            p50, p95 = percentiles(jobs)
            assert noop.p50_seconds[index] == pytest.approx(p50), index
            assert noop.p95_seconds[index] == pytest.approx(p95), index
        else:
            assert (noop.p50_seconds[index], noop.p95_seconds[index]) == (None, None)


def test_retries_and_rescues_land_in_the_bucket_of_their_event(hour):
    board = dashboard.board("1h")
    series = {one.type: one for one in board.series}

    assert series["tests.flaky"].retries == [0] * 6 + [1] + [0] * 2 + [1] + [0] * 2
    assert series["tests.crash"].rescues == [0] * 9 + [1] + [0] * 2
    assert sum(series["tests.crash"].finished) == 0


def test_the_series_add_up_to_the_windows_figures(hour):
    board = dashboard.board("1h")
    figures = {row.type: row for row in board.figures.types}

    assert [one.type for one in board.series] == sorted(figures)
    for one in board.series:
        row = figures[one.type]
        assert (sum(one.finished), sum(one.failed)) == (row.finished, row.failed)
        assert (sum(one.retries), sum(one.rescues)) == (row.retries, row.rescues)
    assert figures["tests.noop"].finished == 9  # not the one finished before the window


def test_each_chart_family_is_one_query_whatever_the_number_of_buckets(hour):
    for window, count in (("1h", 12), ("24h", 24), ("7d", 28)):
        board = dashboard.board(window)
        assert board.buckets.count == count
        with CaptureQueriesContext(connection) as queries:
            dashboard.type_series(board.buckets, board.figures.until)
        assert len(queries) == 2
        assert all("date_bin" in query["sql"] for query in queries.captured_queries)


def test_the_board_agrees_with_the_apis_figures(hour):
    board = dashboard.board("24h")
    assert board.figures == dashboard.figures("24h")
    assert board.figures.until == T0 + timedelta(hours=1)


def test_the_oldest_due_jobs_come_first_with_their_age(clock):
    first = make_job("tests.noop")
    clock.advance(30)
    second = make_job("tests.noop", queue="slow")
    parent = make_job("tests.keyed")
    engine.claim("w1", limit=1, types=["tests.keyed"])
    make_job("tests.noop", parent=parent)  # waits on its running parent: not due work
    make_job("tests.noop", run_after=clock.now() + timedelta(minutes=5))  # not due yet
    clock.advance(15)

    board = dashboard.board("1h")

    assert [(row.job.pk, row.age_seconds) for row in board.oldest_due] == [
        (first.pk, 45.0),
        (second.pk, 15.0),
    ]
    assert max(lag.lag_seconds for lag in board.figures.queues) == board.oldest_due[0].age_seconds


def test_the_stuck_list_holds_running_jobs_past_their_lease(clock):
    gone = make_job("tests.crash")
    engine.claim("w1", limit=1, types=["tests.crash"])
    clock.advance(4)
    later = make_job("tests.keyed")
    engine.claim("w2", limit=1, types=["tests.keyed"])
    clock.advance(4)  # the first lease lapsed 2 s ago; the second has 2 s to go
    fresh = dashboard.board("1h")
    clock.advance(5)

    board = dashboard.board("1h")

    assert [row.job.pk for row in fresh.stuck] == [gone.pk]
    assert [(row.job.pk, row.overdue_seconds) for row in board.stuck] == [(gone.pk, 7.0), (later.pk, 3.0)]
    assert board.figures.expired_leases == 2


def test_the_lists_are_capped(clock):
    for _ in range(3):
        make_job("tests.noop")
    clock.advance(1)
    assert len(dashboard.board("1h", limit=2).oldest_due) == 2


def test_an_empty_window_has_empty_series_and_lists(clock):
    board = dashboard.board("7d")
    assert (board.series, board.oldest_due, board.stuck) == ([], [], [])
    assert board.buckets.starts[0] == clock.now() - timedelta(days=7)
