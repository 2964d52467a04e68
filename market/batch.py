"""The daily batch: when it is due, what it loads, and the gaps it heals.

A tick every few minutes (``market.Tick``, on django-q2's scheduler) looks at each
enabled feed in the market's timezone. From 18:30 on a trading day, a feed without a
batch for the date gets one: the calendar and the instruments are refreshed, then
(``market.PlanBatch``, once the calendar is in) the batch looks back 7 days for open
days with no bars, queues at most 3 of them, newest first, and then today's load. With
``MARKET_REFETCH_DAYS`` set, it also loads the last few open days that have bars again
(their load upserts: a restatement arrives, unchanged bars write nothing).
``market.FinishBatch`` settles the batch once every load has ended; a load an operator
runs again reopens a batch it failed (``reopen``), which settles again after it.

A tick that comes later than the misfire grace (2 hours) after 18:30 records the date
as missed instead: a cluster that was down all evening does not start a batch at
midnight, and the next batch's gap-fill loads the day.
"""

from __future__ import annotations

import logging
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction

import jobs
from market import conf, freshness
from market.models import (
    ACTIVE_LOAD,
    BatchStatus,
    DailyBar,
    DailyBatch,
    DayLoad,
    LoadStatus,
    LoadTrigger,
    MarketFeed,
    TradingDay,
)

LOAD_DAY = "market.LoadDay"
LOAD_CALENDAR = "market.LoadCalendar"
LOAD_INSTRUMENTS = "market.LoadInstruments"
PLAN_BATCH = "market.PlanBatch"
FINISH_BATCH = "market.FinishBatch"
LIST_STATUSES = ("L", "D", "P")

# The daily batch's loads go before operators' backfills of the same queue.
BATCH_PRIORITY = 10
# Active loads a sweep looks at, the oldest first; and how long a running batch with no
# load left to wait for is given before the sweep settles it.
SWEEP_LIMIT = 1000
BATCH_STALLED_AFTER = timedelta(hours=6)
# The most open days the batch's re-fetch takes, whatever MARKET_REFETCH_DAYS says: each
# is an API call every evening.
REFETCH_MAX_DAYS = 20

logger = logging.getLogger(__name__)


def due_at(day: date) -> datetime:
    hour, minute = (int(part) for part in str(conf.get("MARKET_BATCH_AT")).split(":"))
    return datetime.combine(day, time(hour, minute), tzinfo=freshness.market_timezone())


def is_trading_day(feed: MarketFeed, day: date) -> bool | None:
    """What the feed's calendar says of ``day``; None when the calendar does not know it
    (before the first calendar load)."""
    return (
        TradingDay.objects.filter(feed=feed, exchange=feed.exchange, cal_date=day)
        .values_list("is_open", flat=True)
        .first()
    )


def tick(now: datetime) -> list[str]:
    """Settle what a crash left open (``settle_stuck``), then start each enabled feed's
    batch that is due, or record it missed; what it did. One feed's trouble does not
    keep the others' batches from starting."""
    done = [f"{settled} stuck load(s) or batch(es) settled"] if (settled := settle_stuck(now)) else []
    today = freshness.market_date(now)
    due = due_at(today)
    if now < due:
        return done
    grace = timedelta(seconds=float(conf.get("MARKET_MISFIRE_GRACE_SECONDS")))
    for feed in MarketFeed.objects.filter(enabled=True).order_by("pk"):
        try:
            outcome = _tick_feed(feed, today, now=now, due=due, grace=grace)
        except IntegrityError:
            outcome = None  # another process started the day's batch meanwhile
        except Exception:
            logger.exception("market feed %s: the daily batch could not start", feed.pk)
            outcome = f"{feed}: the batch could not start (see the log)"
        if outcome:
            done.append(outcome)
    return done


def _tick_feed(
    feed: MarketFeed, today: date, *, now: datetime, due: datetime, grace: timedelta
) -> str | None:
    trading = is_trading_day(feed, today)
    # Without a calendar yet (a first boot), a weekday is worth a batch: it loads the
    # calendar first and goes no further on a holiday.
    if trading is False or (trading is None and today.weekday() >= 5):
        return None
    with transaction.atomic():
        if DailyBatch.objects.filter(feed=feed, market_date=today).exists():
            return None
        if now > due + grace:
            DailyBatch.objects.create(
                feed=feed,
                market_date=today,
                status=BatchStatus.MISSED,
                due_at=due,
                finished_at=now,
                note=f"not started by {(due + grace):%H:%M} (the misfire grace): the next "
                f"batch's gap-fill loads {today}",
            )
            return f"{feed}: {today} missed"
        start(feed, today, now=now, due=due)
        return f"{feed}: batch of {today} started"


def settle_stuck(now: datetime) -> int:
    """The safety net for what a crash or a cancelled job leaves open: a queued or running
    load whose job has ended fails (else it would cover its day for good), with its batch
    when no other load of it is left, and a batch still running hours after its start
    with no load left to wait for is settled. How many were settled."""
    settled = 0
    active = dict(
        DayLoad.objects.filter(ACTIVE_LOAD, job_id__isnull=False)
        .order_by("created_at", "pk")
        .values_list("job_id", "pk")[:SWEEP_LIMIT]
    )
    over = []
    for job_id in jobs.pipelines_over(list(active), before=now):
        with transaction.atomic():
            # Under the load's lock, asked again: an operator who ran the job again since
            # takes the same lock (``services.follow_load_operator``), so the load either
            # fails here first and is then reopened, or is left to the job running again.
            locked = DayLoad.objects.select_for_update().filter(ACTIVE_LOAD, pk=active[job_id]).first()
            if locked is None or not jobs.pipelines_over([job_id], before=now):
                continue
            over.append(locked.pk)
            settled += DayLoad.objects.filter(pk=locked.pk).update(
                status=LoadStatus.FAILED,
                finished_at=now,
                error=f"its job {job_id} ended without finishing the load",
            )
    # Their batches' finish waited for them (``finish``): settled now, not hours later.
    ended = DailyBatch.objects.filter(status=BatchStatus.RUNNING, loads__in=over).distinct()
    for batch in ended.exclude(loads__in=DayLoad.objects.filter(ACTIVE_LOAD)):
        settle_batch(batch, now)
        settled += 1
    stalled = DailyBatch.objects.filter(status=BatchStatus.RUNNING, started_at__lt=now - BATCH_STALLED_AFTER)
    for batch in stalled.exclude(loads__in=DayLoad.objects.filter(ACTIVE_LOAD)):
        settle_batch(batch, now, why="its plan or its finish did not run to the end")
        settled += 1
    return settled


def start(
    feed: MarketFeed, today: date, *, now: datetime, due: datetime | None = None, actor: Any = None
) -> DailyBatch:
    """A batch for ``today``: refresh the calendar and the instruments, then plan."""
    batch = DailyBatch.objects.create(
        feed=feed, market_date=today, status=BatchStatus.RUNNING, due_at=due or now, started_at=now
    )
    options = {"tenant": feed.tenant_id, "priority": BATCH_PRIORITY, "created_by": actor}
    calendar = jobs.enqueue(LOAD_CALENDAR, {"feed": feed.pk}, **options)
    instruments = jobs.enqueue_many(
        LOAD_INSTRUMENTS, [{"feed": feed.pk, "list_status": status} for status in LIST_STATUSES], **options
    )
    jobs.enqueue(PLAN_BATCH, {"batch": batch.pk}, after=[calendar, *instruments], **options)
    return batch


def gaps(feed: MarketFeed, *, since: date, before: date, limit: int | None = None) -> list[date]:
    """Open trading days from ``since`` up to (not including) ``before`` that have no bars,
    newest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT c.cal_date FROM {TradingDay._meta.db_table} c
            WHERE c.feed_id = %(feed)s AND c.exchange = %(exchange)s AND c.is_open
              AND c.cal_date >= %(since)s AND c.cal_date < %(before)s
              AND NOT EXISTS (SELECT 1 FROM {DailyBar._meta.db_table} d
                              WHERE d.feed_id = c.feed_id AND d.trade_date = c.cal_date)
            ORDER BY c.cal_date DESC
            LIMIT %(limit)s""",
            {"feed": feed.pk, "exchange": feed.exchange, "since": since, "before": before, "limit": limit},
        )
        return [row[0] for row in cursor.fetchall()]


def refetch_window(feed: MarketFeed, *, before: date, days: int) -> list[date]:
    """Of the last ``days`` open days before ``before``, those that have bars, newest
    first: what the batch loads again for the restatements published since (the others
    are gaps, its gap-fill's)."""
    if days <= 0:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT c.cal_date FROM (
                SELECT cal_date FROM {TradingDay._meta.db_table}
                WHERE feed_id = %(feed)s AND exchange = %(exchange)s AND is_open AND cal_date < %(before)s
                ORDER BY cal_date DESC
                LIMIT %(days)s) c
            WHERE EXISTS (SELECT 1 FROM {DailyBar._meta.db_table} d
                          WHERE d.feed_id = %(feed)s AND d.trade_date = c.cal_date)
            ORDER BY c.cal_date DESC""",
            {"feed": feed.pk, "exchange": feed.exchange, "before": before, "days": days},
        )
        return [row[0] for row in cursor.fetchall()]


def refetch_days() -> int:
    """``MARKET_REFETCH_DAYS``, within 0 … ``REFETCH_MAX_DAYS``."""
    return max(0, min(int(conf.get("MARKET_REFETCH_DAYS")), REFETCH_MAX_DAYS))


def plan(ctx: jobs.JobContext, batch: DailyBatch) -> dict[str, Any]:
    """After the calendar load: heal the look-back's gaps, newest first and at most
    ``MARKET_GAP_MAX_DAYS`` of them, then load today, and load again the last
    ``MARKET_REFETCH_DAYS`` open days that have bars (after today's: a restatement
    matters less than the day itself). A day an operator's backfill is loading already is
    taken into the batch (its load is waited for and counted)."""
    feed, today = batch.feed, batch.market_date
    # The fan-in runs whatever its loads did: a calendar load that failed leaves the last
    # one's calendar, which may know today all the same, and is no calendar to plan on.
    calendar = [p.id for p in ctx.prerequisites() if p.type == LOAD_CALENDAR and not p.succeeded]
    trading = None if calendar else is_trading_day(feed, today)
    if trading is not True:
        if calendar:
            status = BatchStatus.FAILED
            why = f"its calendar load (job {calendar[0]}) failed: nothing loaded (the next batch's gap-fill)"
        elif trading is False:
            status, why = BatchStatus.SUCCEEDED, "not a trading day"
        else:
            status, why = BatchStatus.FAILED, "the calendar does not know the day (its load failed)"
        DailyBatch.objects.filter(pk=batch.pk).update(status=status, finished_at=jobs.now(), note=why)
        return {"batch": batch.pk, "loads": 0, "note": why}
    lookback = int(conf.get("MARKET_GAP_LOOKBACK_DAYS"))
    missing = gaps(
        feed, since=today - timedelta(days=lookback), before=today, limit=int(conf.get("MARKET_GAP_MAX_DAYS"))
    )
    refetch = [day for day in refetch_window(feed, before=today, days=refetch_days()) if day not in missing]
    DailyBatch.objects.filter(pk=batch.pk).update(gaps=[day.isoformat() for day in missing])
    DayLoad.objects.filter(
        ACTIVE_LOAD, feed=feed, trade_date__in=[*missing, today, *refetch], batch__isnull=True
    ).update(batch=batch)
    queued = queue_loads(feed, missing, LoadTrigger.GAP_FILL, batch=batch, priority=BATCH_PRIORITY + 1)
    queued += queue_loads(feed, [today], LoadTrigger.SCHEDULE, batch=batch, priority=BATCH_PRIORITY)
    queued += queue_loads(feed, refetch, LoadTrigger.REFETCH, batch=batch, priority=BATCH_PRIORITY - 1)
    loads = list(DayLoad.objects.filter(batch=batch).values_list("job_id", flat=True))
    jobs.enqueue(
        FINISH_BATCH,
        {"batch": batch.pk},
        after=[pk for pk in loads if pk],
        tenant=feed.tenant_id,
        priority=BATCH_PRIORITY,
    )
    return {
        "batch": batch.pk,
        "gaps": [day.isoformat() for day in missing],
        "refetch": [day.isoformat() for day in refetch],
        "loads": len(queued),
    }


def queue_loads(
    feed: MarketFeed,
    days: list[date],
    trigger: str,
    *,
    batch: DailyBatch | None = None,
    priority: int = 0,
    actor: Any = None,
) -> list[DayLoad]:
    """A load per day, with its job, for each day no load covers already (one queued or
    running); the loads created, in ``days``' order."""
    if not days:
        return []
    now = jobs.now()
    user = actor if getattr(actor, "is_authenticated", False) else None
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {DayLoad._meta.db_table} (feed_id, trade_date, trigger, batch_id,
                    status, job_id, rows, error, requested_by_id, created_at, finished_at)
                SELECT %(feed)s, day, %(trigger)s, %(batch)s, %(queued)s, NULL, NULL, '',
                       %(user)s, %(now)s, NULL
                FROM unnest(%(days)s::date[]) WITH ORDINALITY AS d(day, n)
                ORDER BY n
                ON CONFLICT (feed_id, trade_date) WHERE status IN ('queued', 'running')
                DO NOTHING
                RETURNING id""",
                {
                    "feed": feed.pk,
                    "trigger": trigger,
                    "batch": getattr(batch, "pk", None),
                    "queued": LoadStatus.QUEUED,
                    "user": getattr(user, "pk", None),
                    "now": now,
                    "days": days,
                },
            )
            ids = [row[0] for row in cursor.fetchall()]
        loads = sorted(DayLoad.objects.filter(pk__in=ids), key=lambda load: ids.index(load.pk))
        job_ids = jobs.enqueue_many(
            LOAD_DAY,
            [{"load": load.pk} for load in loads],
            tenant=feed.tenant_id,
            priority=priority,
            created_by=user,
        )
        for load, job_id in zip(loads, job_ids, strict=True):
            load.job_id = job_id
        DayLoad.objects.bulk_update(loads, ["job_id"])
    return loads


def finish(ctx: jobs.JobContext, batch: DailyBatch) -> dict[str, Any]:
    """Every load of the batch has ended: the batch succeeded if they all did. A load
    that runs again (an operator retried it: ``reopen``) is waited for: the finish that
    follows it settles the batch."""
    waiting = sorted(DayLoad.objects.filter(ACTIVE_LOAD, batch=batch).values_list("trade_date", flat=True))
    if waiting:
        return {"batch": batch.pk, "waiting": [day.isoformat() for day in waiting]}
    return settle_batch(batch, jobs.now())


def reopen(load: DayLoad, job_id: int, *, why: str) -> bool:
    """``load``, of a batch, runs again (its job ``job_id`` is pending): a batch it had
    failed is running again, and a finish after the job settles it anew, so that a load
    that now succeeds does not leave it saying the day failed. A batch that succeeded
    keeps its outcome (a replayed load does not undo what it did). Whether the batch is
    running."""
    if load.batch_id is None:
        return False
    DailyBatch.objects.filter(pk=load.batch_id, status=BatchStatus.FAILED).update(
        status=BatchStatus.RUNNING, finished_at=None, note=why
    )
    if not DailyBatch.objects.filter(pk=load.batch_id, status=BatchStatus.RUNNING).exists():
        return False
    jobs.enqueue(
        FINISH_BATCH,
        {"batch": load.batch_id},
        after=[job_id],
        tenant=load.feed.tenant_id,
        priority=BATCH_PRIORITY,
    )
    return True


def settle_batch(batch: DailyBatch, now: datetime, *, why: str = "") -> dict[str, Any]:
    statuses = list(DayLoad.objects.filter(batch=batch).values_list("trade_date", "status"))
    failed = [day.isoformat() for day, status in statuses if status != LoadStatus.SUCCEEDED]
    problems = [why] if why else []
    if failed:
        problems.append(f"loads failed: {', '.join(failed)}")
    status = BatchStatus.FAILED if problems else BatchStatus.SUCCEEDED
    note = "; ".join(problems) or f"{len(statuses)} day(s) loaded"
    DailyBatch.objects.filter(pk=batch.pk, status=BatchStatus.RUNNING).update(
        status=status, finished_at=now, note=note
    )
    return {"batch": batch.pk, "status": status, "failed": failed}


def covering(feed: MarketFeed, days: list[date]) -> dict[date, DayLoad]:
    """The queued or running load of each of ``days`` that has one."""
    return {
        load.trade_date: load for load in DayLoad.objects.filter(ACTIVE_LOAD, feed=feed, trade_date__in=days)
    }
