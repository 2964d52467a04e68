"""Loading the datasets, one engine job per call: fetch, check, upsert, and record how it
went.

A fetch's transient failure (``client.Transient``) is an engine retry: the job fails
its attempt and the engine runs it again after 10, then 20 seconds (``RETRY``), three
attempts in all. No handler sleeps. Authentication errors, rate limits and bad answers
fail at once. An answer is checked before anything is written (``datasets.checked``):
a bad value is the API's error like a refusal, not a failed write to retry. Each failed
attempt is recorded on the source's freshness (its last failure and error), each success
too, in the transaction that writes the rows.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any, NoReturn

from django.db import transaction

import jobs
from market import batch, client, conf, datasets, freshness
from market.models import Dataset, DayLoad, LoadStatus, MarketFeed

RETRY = jobs.Schedule((10.0, 20.0, 40.0))
ATTEMPTS = 3


def fetch(feed: MarketFeed, spec: datasets.Spec, **params: Any) -> client.Table:
    return client.call(feed.api_url, feed.token, spec.api_name, datasets.params(**params), spec.fields)


def failed(
    ctx: jobs.JobContext, feed: MarketFeed, error: client.MarketError, *, load: DayLoad | None = None
) -> NoReturn:
    """Record a failed attempt and end it: a transient error with attempts left is
    retried after the backoff; any other, or the last attempt's, fails the job with a
    message that names the API and the last error."""
    now = jobs.now()
    final = not error.retry or ctx.attempt >= ctx.job.max_attempts
    message = (
        f"{error.api_name} failed after {ctx.attempt} attempts: {error}"
        if error.retry and final
        else str(error)
    )
    with ctx.batch():
        freshness.record_failure(feed, error.api_name, message if final else str(error), now)
        if load is not None and final:
            DayLoad.objects.filter(pk=load.pk).update(
                status=LoadStatus.FAILED, error=message[:4000], finished_at=now
            )
    if final:
        raise jobs.PermanentError(message) from error
    raise jobs.TransientError(str(error)) from error


def calendar_span(today: date) -> tuple[date, date]:
    """The calendar a batch keeps: from January 1 of the look-back's first year to the
    end of this year."""
    first = today - timedelta(days=int(conf.get("MARKET_GAP_LOOKBACK_DAYS")))
    return date(first.year, 1, 1), date(today.year, 12, 31)


def load_calendar(ctx: jobs.JobContext, feed: MarketFeed) -> dict[str, Any]:
    start, end = calendar_span(freshness.market_date(jobs.now()))
    try:
        answer = datasets.checked(
            datasets.CALENDAR,
            fetch(feed, datasets.CALENDAR, exchange=feed.exchange, start_date=start, end_date=end),
        )
    except client.MarketError as error:
        failed(ctx, feed, error)
    with ctx.batch():
        rows = datasets.upsert_calendar(feed, answer)
        freshness.record_success(feed, Dataset.CALENDAR, rows, jobs.now())
    return {"feed": feed.name, "days": rows}


def load_instruments(ctx: jobs.JobContext, feed: MarketFeed, list_status: str) -> dict[str, Any]:
    try:
        answer = datasets.checked(
            datasets.INSTRUMENTS, fetch(feed, datasets.INSTRUMENTS, exchange="", list_status=list_status)
        )
    except client.MarketError as error:
        failed(ctx, feed, error)
    with ctx.batch():
        rows = datasets.upsert_instruments(feed, answer)
        freshness.record_success(feed, Dataset.INSTRUMENTS, rows, jobs.now())
    return {"feed": feed.name, "list_status": list_status, "instruments": rows}


def load_day(ctx: jobs.JobContext, load: DayLoad) -> dict[str, Any]:
    """One day's bars. An open day that comes back empty has not been published yet:
    a transient failure, retried like a timeout. A day that is not open and comes back
    empty has nothing to load, and its bars (if any) are left as they are.

    Whatever ends the last attempt, the load ends ``failed`` with it: a load left queued
    or running would cover its day for good (no later batch would load it)."""
    feed = load.feed
    with transaction.atomic():
        started = DayLoad.objects.filter(
            pk=load.pk, status__in=[LoadStatus.QUEUED, LoadStatus.RUNNING]
        ).update(status=LoadStatus.RUNNING, error="")
    if not started:
        return {
            "feed": feed.name,
            "trade_date": load.trade_date.isoformat(),
            "skipped": "the load has ended already",
        }
    try:
        return _load_day(ctx, feed, load)
    except (jobs.PermanentError, jobs.TransientError):
        raise
    except Exception as exc:
        if ctx.attempt >= ctx.job.max_attempts:
            _end_failed(load, f"{type(exc).__name__}: {exc}")
        raise


def _load_day(ctx: jobs.JobContext, feed: MarketFeed, load: DayLoad) -> dict[str, Any]:
    try:
        table = fetch(feed, datasets.DAILY, trade_date=load.trade_date)
        if not table.items and batch.is_trading_day(feed, load.trade_date):
            raise client.Transient(Dataset.DAILY, f"daily: no bars for {load.trade_date} yet (not published)")
        answer = datasets.checked(datasets.DAILY, table, day=load.trade_date)
    except client.MarketError as error:
        failed(ctx, feed, error, load=load)
    with ctx.batch():
        now = jobs.now()
        counts = (
            {"rows": 0, "written": 0, "removed": 0}
            if not answer.rows
            else datasets.upsert_daily(feed, load.trade_date, answer)
        )
        freshness.record_success(feed, Dataset.DAILY, counts["rows"], now)
        DayLoad.objects.filter(pk=load.pk).update(
            status=LoadStatus.SUCCEEDED, rows=counts["rows"], finished_at=now
        )
    return {"feed": feed.name, "trade_date": load.trade_date.isoformat(), **counts}


def _end_failed(load: DayLoad, error: str) -> None:
    with transaction.atomic():
        DayLoad.objects.filter(pk=load.pk, status__in=[LoadStatus.QUEUED, LoadStatus.RUNNING]).update(
            status=LoadStatus.FAILED, error=error[:4000], finished_at=jobs.now()
        )
