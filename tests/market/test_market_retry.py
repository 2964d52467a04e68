"""An operator who runs a market load's job again (retry, replay, recover, run now) runs
its load again: the engine's operator hook (``jobs.handler(on_operator=...)``) reopens
the load in the action's transaction, so the job fetches and writes the day instead of
skipping a load that had ended. Against the fake market-data API over HTTP, on the
engine's manual clock; the clock starts on Monday 2026-11-02 at 17:00 in Shanghai."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.test import override_settings

import jobs
from devtools.fakes.market_api import FakeMarket
from jobs import engine
from jobs.models import Job
from market import batch, freshness
from market.models import (
    BatchStatus,
    DailyBar,
    DailyBatch,
    DayLoad,
    LoadStatus,
    LoadTrigger,
    MarketAction,
    MarketFeed,
)
from tests.support.base import as_user, operating, staff
from tests.support.drive import drain

pytestmark = pytest.mark.django_db(transaction=True)

MONDAY = date(2026, 11, 2)
FRIDAY = date(2026, 10, 30)
DUE = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)  # 18:30 in Shanghai
INSTRUMENTS = 60


@pytest.fixture
def market():
    with FakeMarket(instruments=INSTRUMENTS, today=MONDAY) as server:
        yield server


@pytest.fixture
def feed(acme, market) -> MarketFeed:
    return MarketFeed.objects.create(tenant=acme, name="cn-equities", api_url=market.url, token="demo-token")


@pytest.fixture
def olga(acme):
    """Staff of the feed's tenant who may operate its jobs."""
    return operating(staff("olga", of=acme))


@pytest.fixture(autouse=True)
def short_timeouts():
    with override_settings(INGEST_MARKET_TIMEOUT_SECONDS=0.5, INGEST_HTTP_CONNECT_SECONDS=0.5):
        yield


def calendar(feed: MarketFeed, clock) -> None:
    jobs.enqueue(batch.LOAD_CALENDAR, {"feed": feed.pk}, tenant=feed.tenant_id)
    drain(clock)


def failed_load(feed: MarketFeed, clock, market: FakeMarket, day: date = FRIDAY) -> DayLoad:
    """A load of ``day`` the API refused (an authentication error: failed at once)."""
    market.fail("daily", "401")
    (load,) = batch.queue_loads(feed, [day], LoadTrigger.OPERATOR)
    drain(clock)
    load.refresh_from_db()
    assert load.status == LoadStatus.FAILED and Job.objects.get(pk=load.job_id).state == "failed"
    return load


def bars(feed: MarketFeed, day: date) -> int:
    return DailyBar.objects.filter(feed=feed, trade_date=day).count()


def run_batch(clock, market: FakeMarket, at: datetime) -> None:
    clock.advance((at - clock.now()).total_seconds())
    market.set_today(freshness.market_date(at))
    jobs.enqueue("market.Tick")
    drain(clock)


def test_retrying_a_failed_load_through_the_api_fetches_and_writes_the_day(clock, feed, market, olga):
    calendar(feed, clock)
    load = failed_load(feed, clock, market)
    calls = market.calls["daily"]

    response = as_user(olga).post(f"/api/jobs/{load.job_id}/retry/", {"reason": "token renewed"})

    assert response.status_code == 200, response.content
    load.refresh_from_db()
    assert (load.status, load.error, load.finished_at, load.rows) == (LoadStatus.QUEUED, "", None, None)
    drain(clock)
    load.refresh_from_db()
    job = Job.objects.get(pk=load.job_id)
    assert (job.state, load.status, load.rows) == ("succeeded", LoadStatus.SUCCEEDED, INSTRUMENTS - 2)
    assert "skipped" not in job.result and job.result["written"] == INSTRUMENTS - 2
    assert market.calls["daily"] == calls + 1
    assert bars(feed, FRIDAY) == INSTRUMENTS - 2
    action = MarketAction.objects.get()
    assert (action.feed, action.kind, action.actor, action.via) == (feed, "load_retry", olga, "api")
    assert (action.from_status, action.to_status) == (LoadStatus.FAILED, LoadStatus.QUEUED)
    assert action.detail["load"] == load.pk and action.detail["job"] == load.job_id
    assert "authentication refused" in action.detail["was"]


def test_a_retry_is_refused_while_another_load_covers_the_day(clock, feed, market, olga):
    calendar(feed, clock)
    load = failed_load(feed, clock, market)
    (covering,) = batch.queue_loads(feed, [FRIDAY], LoadTrigger.SCHEDULE)
    job = Job.objects.get(pk=load.job_id)

    response = as_user(olga).post(f"/api/jobs/{job.pk}/retry/")
    with pytest.raises(jobs.IllegalTransition) as refused:
        jobs.retry(job, actor=olga, via="admin")

    assert response.status_code == 409
    for message in (response.json()["detail"], str(refused.value)):
        assert f"load {load.pk} of {FRIDAY}" in message
        assert f"load {covering.pk} of the same day (job {covering.job_id}, queued)" in message
    # Nothing of the action was written: the job, the load and the feed's history are as
    # they were.
    job.refresh_from_db()
    load.refresh_from_db()
    assert (job.state, load.status) == ("failed", LoadStatus.FAILED)
    assert not job.events.filter(kind="retried").exists()
    assert not MarketAction.objects.exists()


def test_replaying_a_succeeded_load_loads_the_day_again(clock, feed, market, olga):
    calendar(feed, clock)
    (load,) = batch.queue_loads(feed, [FRIDAY], LoadTrigger.OPERATOR)
    drain(clock)
    DailyBar.objects.filter(feed=feed, trade_date=FRIDAY, ts_code="600000.SH").update(close=0.01)

    engine.replay(Job.objects.get(pk=load.job_id), actor=olga, via="admin")
    drain(clock)

    load.refresh_from_db()
    assert load.status == LoadStatus.SUCCEEDED
    assert Job.objects.get(pk=load.job_id).result["written"] == 1  # the bar the API restates
    assert not DailyBar.objects.filter(feed=feed, trade_date=FRIDAY, close=0.01).exists()
    assert MarketAction.objects.get().kind == "load_replay"


def test_recovering_a_job_whose_load_was_failed_runs_the_load_again(clock, feed, market, olga):
    calendar(feed, clock)
    (load,) = batch.queue_loads(feed, [FRIDAY], LoadTrigger.OPERATOR)
    # A worker that failed the load on its last attempt, then died before the job's outcome.
    DayLoad.objects.filter(pk=load.pk).update(status=LoadStatus.FAILED, error="lost", finished_at=clock.now())
    job = Job.objects.get(pk=load.job_id)

    jobs.recover(job, actor=olga, via="command")
    drain(clock)

    load.refresh_from_db()
    assert (load.status, load.rows) == (LoadStatus.SUCCEEDED, INSTRUMENTS - 2)
    assert MarketAction.objects.get().kind == "load_recover"


def test_an_operators_cancel_leaves_the_load_to_the_sweep(clock, feed, market, olga):
    (load,) = batch.queue_loads(feed, [FRIDAY], LoadTrigger.OPERATOR)

    jobs.cancel(Job.objects.get(pk=load.job_id), actor=olga, via="admin")

    load.refresh_from_db()
    assert load.status == LoadStatus.QUEUED and not MarketAction.objects.exists()


def test_a_retried_load_reopens_the_batch_it_failed_which_then_succeeds(clock, feed, market, olga):
    market.set_missing_day(MONDAY)
    run_batch(clock, market, DUE)
    done = DailyBatch.objects.get(feed=feed, market_date=MONDAY)
    assert done.status == BatchStatus.FAILED and done.note == "loads failed: 2026-11-02"
    monday = DayLoad.objects.get(feed=feed, trade_date=MONDAY)
    market.clear()  # the day is published now

    jobs.retry(Job.objects.get(pk=monday.job_id), actor=olga, via="admin")

    done.refresh_from_db()
    assert (done.status, done.finished_at) == (BatchStatus.RUNNING, None)
    assert done.note == f"the load of {MONDAY} runs again (retry by olga via admin)"
    drain(clock)
    done.refresh_from_db()
    monday.refresh_from_db()
    assert monday.status == LoadStatus.SUCCEEDED and bars(feed, MONDAY) == INSTRUMENTS - 2
    assert (done.status, done.note) == (BatchStatus.SUCCEEDED, "4 day(s) loaded")
    assert done.finished_at is not None
    assert MarketAction.objects.get().detail["batch"] == done.pk


def test_a_batch_waits_for_each_of_its_loads_run_again_before_it_settles(clock, feed, market, olga):
    market.set_missing_day(MONDAY)
    market.set_missing_day(FRIDAY)
    run_batch(clock, market, DUE)
    done = DailyBatch.objects.get(feed=feed, market_date=MONDAY)
    assert done.status == BatchStatus.FAILED
    assert "2026-10-30" in done.note and "2026-11-02" in done.note
    market.clear()
    friday, monday = (DayLoad.objects.get(feed=feed, trade_date=day) for day in (FRIDAY, MONDAY))
    jobs.retry(Job.objects.get(pk=friday.job_id), actor=olga, via="admin")
    jobs.retry(Job.objects.get(pk=monday.job_id), actor=olga, via="admin")
    # Monday's load runs an hour later: Friday's finish comes first and must wait for it.
    Job.objects.filter(pk=monday.job_id).update(run_after=clock.now() + timedelta(hours=1))

    jobs.run_until_idle()

    friday.refresh_from_db()
    done.refresh_from_db()
    assert friday.status == LoadStatus.SUCCEEDED
    assert done.status == BatchStatus.RUNNING  # Monday's load still queued
    drain(clock)
    done.refresh_from_db()
    assert (done.status, done.note) == (BatchStatus.SUCCEEDED, "4 day(s) loaded")


def test_a_replayed_load_of_a_batch_that_succeeded_leaves_the_batch_as_it_was(clock, feed, market, olga):
    run_batch(clock, market, DUE)
    done = DailyBatch.objects.get(feed=feed, market_date=MONDAY)
    assert done.status == BatchStatus.SUCCEEDED
    monday = DayLoad.objects.get(feed=feed, trade_date=MONDAY)
    finished = done.finished_at

    engine.replay(Job.objects.get(pk=monday.job_id), actor=olga, via="admin")
    drain(clock)

    done.refresh_from_db()
    monday.refresh_from_db()
    assert (done.status, done.finished_at) == (BatchStatus.SUCCEEDED, finished)
    assert monday.status == LoadStatus.SUCCEEDED
    assert "batch" not in MarketAction.objects.get().detail


def test_a_finish_that_waited_for_a_load_whose_job_died_is_settled_by_the_next_sweep(
    clock, feed, market, olga
):
    market.set_missing_day(MONDAY)
    run_batch(clock, market, DUE)
    done = DailyBatch.objects.get(feed=feed, market_date=MONDAY)
    monday = DayLoad.objects.get(feed=feed, trade_date=MONDAY)
    jobs.retry(Job.objects.get(pk=monday.job_id), actor=olga, via="admin")
    # The load's job is cancelled before it runs: its load stays queued, and the batch's
    # finish, after the job, waits for it.
    jobs.cancel(Job.objects.get(pk=monday.job_id), actor=olga, via="admin")
    drain(clock)
    done.refresh_from_db()
    assert done.status == BatchStatus.RUNNING

    run_batch(clock, market, DUE + timedelta(minutes=5))

    done.refresh_from_db()
    monday.refresh_from_db()
    assert monday.status == LoadStatus.FAILED
    assert (done.status, done.note) == (BatchStatus.FAILED, "loads failed: 2026-11-02")
