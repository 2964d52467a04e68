"""The market-data jobs:

    market.Tick             (every 5 minutes: starts a due daily batch, or records a miss)
    market.LoadCalendar     ┐
    market.LoadInstruments  ┴→ market.PlanBatch → market.LoadDay × (gaps + today + re-fetches)
                                                 → market.FinishBatch

Loads retry transient failures as engine attempts (10 s, then 20 s; three in all) and
record each outcome on the source's freshness (``loading``); they commit in batches
fenced by the lease, so that a failed attempt's record is kept. An operator who runs a
load's job again (retry, replay, recover, run now) runs its load again
(``services.follow_load_operator``).
"""

from __future__ import annotations

from typing import Any

import jobs
from market import batch, loading, services
from market.models import DailyBatch, DayLoad, ListStatus, MarketFeed

LOAD_OPTIONS: dict[str, Any] = {"max_attempts": loading.ATTEMPTS, "backoff": loading.RETRY, "atomic": False}


def _feed(ctx: jobs.JobContext) -> MarketFeed:
    feed = MarketFeed.objects.filter(pk=ctx.payload.get("feed"), tenant_id=ctx.tenant_id).first()
    if feed is None:
        raise jobs.PermanentError(f"feed {ctx.payload.get('feed')!r} is not one of this job's tenant's")
    return feed


@jobs.handler(
    "market.Tick",
    max_attempts=1,
    maintenance=True,
    # Starts each market feed's daily batch when it is due in the market's timezone, or
    # records it missed past the misfire grace (market/batch.py).
    schedule=jobs.Cron("*/5 * * * *", name="market-daily-batch"),
)
def market_tick(ctx: jobs.JobContext) -> dict[str, Any]:
    return {"done": batch.tick(jobs.now())}


@jobs.handler(batch.LOAD_CALENDAR, **LOAD_OPTIONS)
def load_calendar(ctx: jobs.JobContext) -> dict[str, Any]:
    return loading.load_calendar(ctx, _feed(ctx))


@jobs.handler(batch.LOAD_INSTRUMENTS, **LOAD_OPTIONS)
def load_instruments(ctx: jobs.JobContext) -> dict[str, Any]:
    status = ctx.payload.get("list_status")
    if status not in ListStatus.values:
        raise jobs.PermanentError(f"list_status {status!r} is not one of L, D, P")
    return loading.load_instruments(ctx, _feed(ctx), status)


@jobs.handler(batch.LOAD_DAY, on_operator=services.follow_load_operator, **LOAD_OPTIONS)
def load_day(ctx: jobs.JobContext) -> dict[str, Any]:
    load = (
        DayLoad.objects.select_related("feed")
        .filter(pk=ctx.payload.get("load"), feed__tenant_id=ctx.tenant_id)
        .first()
    )
    if load is None:
        raise jobs.PermanentError(f"load {ctx.payload.get('load')!r} is not one of this job's tenant's")
    return loading.load_day(ctx, load)


def _batch(ctx: jobs.JobContext) -> DailyBatch:
    found = (
        DailyBatch.objects.select_related("feed")
        .filter(pk=ctx.payload.get("batch"), feed__tenant_id=ctx.tenant_id)
        .first()
    )
    if found is None:
        raise jobs.PermanentError(f"batch {ctx.payload.get('batch')!r} is not one of this job's tenant's")
    return found


@jobs.handler(batch.PLAN_BATCH, max_attempts=3)
def plan_batch(ctx: jobs.JobContext) -> dict[str, Any]:
    return batch.plan(ctx, _batch(ctx))


@jobs.handler(batch.FINISH_BATCH, max_attempts=3)
def finish_batch(ctx: jobs.JobContext) -> dict[str, Any]:
    return batch.finish(ctx, _batch(ctx))
