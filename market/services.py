"""What operators, the API and the commands do with market data: see how fresh each source
is, preview and run a gap-fill or a reload of chosen days, keep a load in step with what
operators do to its job, and check the data as the watchdog does."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Max

import jobs
from market import batch, conf, freshness
from market.models import (
    DailyBar,
    Dataset,
    DayLoad,
    Instrument,
    LoadStatus,
    LoadTrigger,
    MarketAction,
    MarketFeed,
    SourceFreshness,
    TradingDay,
)


class GapFillRefused(Exception):
    """A gap-fill that cannot be run as asked; the message says why."""


@dataclass(frozen=True)
class SourceStatus:
    feed: str
    dataset: str
    status: str
    last_success: datetime | None
    last_failure: datetime | None
    last_error: str
    rows_today: int
    old_gaps: int = 0  # the daily source's open days before the look-back without bars
    message: str = ""  # what, besides the last attempt, makes the status what it is


def source_statuses(feeds: Any, now: datetime) -> list[SourceStatus]:
    """Each dataset of each of ``feeds``, with its computed status; a dataset never
    attempted is ``never_ingested``. The daily source is an ``error`` while it has old
    gaps (``old_gaps``): they no longer heal by themselves. Two queries whatever the
    feeds (the board shows every feed's)."""
    feeds = list(feeds)
    rows = {(row.feed_id, row.dataset): row for row in SourceFreshness.objects.filter(feed__in=feeds)}
    today = freshness.market_date(now)
    counted = figures(feeds, today)
    statuses = []
    for feed in feeds:
        bars, instruments, old = counted[feed.pk]
        for dataset in Dataset.values:
            row = rows.get((feed.pk, dataset))
            source = (
                SourceStatus(feed.name, dataset, freshness.NEVER_INGESTED, None, None, "", 0)
                if row is None
                else SourceStatus(
                    feed.name,
                    dataset,
                    freshness.status(row.last_success, row.last_failure, now),
                    row.last_success,
                    row.last_failure,
                    row.last_error,
                    freshness.rows_of(row, today, bars=bars, instruments=instruments),
                )
            )
            if dataset == Dataset.DAILY and old is not None and old.days:
                source = replace(
                    source, status=freshness.ERROR, old_gaps=len(old.days), message=old.describe()
                )
            statuses.append(source)
    return statuses


OLD_GAPS_SHOWN = 5  # the newest old gaps a message names


@dataclass(frozen=True)
class OldGaps:
    """Open days before the batch's look-back that have no bars, newest first: no batch
    heals them any more, a person does (a gap-fill). Looked for from ``since`` up to (not
    including) ``before``, the look-back's first day."""

    days: list[date]
    since: date
    before: date
    lookback: int

    def describe(self) -> str:
        """One line for people: how many, the newest few, where the search started."""
        lookback = f"the {self.lookback}-day look-back ({self.before})"
        if self.since >= self.before:
            return f"no open day to look at before {lookback}: looked from {self.since}"
        if not self.days:
            return f"every open day from {self.since} to {lookback} has bars"
        newest = ", ".join(day.isoformat() for day in self.days[:OLD_GAPS_SHOWN])
        more = len(self.days) - OLD_GAPS_SHOWN
        return (
            f"{len(self.days)} open day(s) from {self.since} to {lookback} have no bars, newest "
            f"{newest}{f' and {more} more' if more > 0 else ''}: no batch heals them, a gap-fill does"
        )


def old_gaps(feed: MarketFeed, today: date) -> OldGaps | None:
    """The feed's old gaps on market date ``today`` (see ``figures``); None for a feed
    without bars."""
    return figures([feed], today)[feed.pk][2]


_FIGURES = f"""
    SELECT x.feed_id, m.first,
        (SELECT count(*) FROM {DailyBar._meta.db_table} d
         WHERE d.feed_id = x.feed_id AND d.trade_date = %(today)s),
        (SELECT count(*) FROM {Instrument._meta.db_table} i WHERE i.feed_id = x.feed_id),
        ARRAY(SELECT c.cal_date FROM {TradingDay._meta.db_table} c
              WHERE m.first IS NOT NULL AND c.feed_id = x.feed_id AND c.exchange = x.exchange
                AND c.is_open AND c.cal_date >= GREATEST(m.first, %(bound)s) AND c.cal_date < %(before)s
                AND NOT EXISTS (SELECT 1 FROM {DailyBar._meta.db_table} d
                                WHERE d.feed_id = c.feed_id AND d.trade_date = c.cal_date)
              ORDER BY c.cal_date DESC)
    FROM unnest(%(feeds)s::bigint[], %(exchanges)s::text[]) AS x(feed_id, exchange)
    CROSS JOIN LATERAL (SELECT min(d.trade_date) AS first FROM {DailyBar._meta.db_table} d
                        WHERE d.feed_id = x.feed_id) m"""


def figures(feeds: list[MarketFeed], today: date) -> dict[int, tuple[int, int, OldGaps | None]]:
    """What each feed's statuses read besides its freshness rows, in one query whatever
    the feeds: its bars of market date ``today``, its instruments, and its old gaps.

    Old gaps are the open days of the feed's calendar before the look-back of ``today``
    that have no bars, from the feed's first bar on and at most ``MARKET_GAP_ALERT_DAYS``
    back; None for a feed without bars. The days before its first bar are where its
    history starts, not gaps in it: a first batch fills a few days, not the year its
    calendar covers."""
    if not feeds:
        return {}
    lookback = int(conf.get("MARKET_GAP_LOOKBACK_DAYS"))
    bound = today - timedelta(days=int(conf.get("MARKET_GAP_ALERT_DAYS")))
    before = today - timedelta(days=lookback)
    with connection.cursor() as cursor:
        cursor.execute(
            _FIGURES,
            {
                "feeds": [feed.pk for feed in feeds],
                "exchanges": [feed.exchange for feed in feeds],
                "today": today,
                "bound": bound,
                "before": before,
            },
        )
        found = cursor.fetchall()
    return {
        feed: (
            bars,
            instruments,
            None if first is None else OldGaps(days, max(first, bound), before, lookback),
        )
        for feed, first, bars, instruments, days in found
    }


@dataclass
class Preview:
    """What a gap-fill of ``start`` … ``end`` would do."""

    feed: MarketFeed
    start: date
    end: date
    missing: list[date] = field(default_factory=list)  # open days without bars, newest first
    covered: dict[date, DayLoad] = field(default_factory=dict)  # already being loaded
    calendar_known: bool = True

    @property
    def to_fetch(self) -> list[date]:
        return [day for day in self.missing if day not in self.covered]

    @property
    def api_calls(self) -> int:
        """One call per day to fetch (and one more for the calendar when it does not
        cover the range)."""
        return len(self.to_fetch) + (0 if self.calendar_known else 1)


def preview_gap_fill(feed: MarketFeed, start: date, end: date, *, today: date | None = None) -> Preview:
    """The open days of ``start`` … ``end`` with no bars, and the loads that already cover
    some of them. Refused: an empty or future range, or one longer than
    ``MARKET_BACKFILL_MAX_DAYS``."""
    today = today or freshness.market_date(jobs.now())
    if start > end:
        raise GapFillRefused(f"the range starts ({start}) after it ends ({end})")
    if end > today:
        raise GapFillRefused(f"the range ends in the future ({end}; the market's today is {today})")
    longest = int(conf.get("MARKET_BACKFILL_MAX_DAYS"))
    if (end - start).days + 1 > longest:
        raise GapFillRefused(
            f"the range is {(end - start).days + 1} days; at most {longest} days per gap-fill"
        )
    known = TradingDay.objects.filter(
        feed=feed, exchange=feed.exchange, cal_date__gte=start, cal_date__lte=end
    ).count()
    missing = batch.gaps(feed, since=start, before=end + timedelta(days=1))
    return Preview(
        feed,
        start,
        end,
        missing,
        batch.covering(feed, missing),
        calendar_known=known == (end - start).days + 1,
    )


def gap_fill(
    feed: MarketFeed, start: date, end: date, *, actor: Any, via: str = "admin", reason: str = ""
) -> tuple[Preview, list[DayLoad]]:
    """Queue a load of each missing day of the range that no load covers, at a priority
    below the daily batch's (a long backfill yields to it); recorded with who asked, and
    why when they said."""
    preview = preview_gap_fill(feed, start, end)
    if not preview.calendar_known:
        raise GapFillRefused(
            f"the calendar does not cover {start} … {end} yet: the daily batch loads it (or run one)"
        )
    with transaction.atomic():
        loads = batch.queue_loads(
            feed,
            preview.to_fetch,
            LoadTrigger.OPERATOR,
            priority=int(conf.get("MARKET_BACKFILL_PRIORITY")),
            actor=actor,
        )
        MarketAction.objects.create(
            feed=feed,
            kind="gap_fill",
            actor=actor if getattr(actor, "is_authenticated", False) else None,
            via=via,
            at=jobs.now(),
            message=reason,
            detail={
                "start": start.isoformat(),
                "end": end.isoformat(),
                "queued": [load.trade_date.isoformat() for load in loads],
                "covered": {day.isoformat(): load.pk for day, load in preview.covered.items()},
            },
        )
    return preview, loads


# --- reloading days ------------------------------------------------------------------------------

REASON_MAX_CHARS = 500
# The operator's actions that run a load's job again, and so the load.
RUNS_AGAIN = frozenset({"retry", "replay", "run_now", "recover"})


class ReloadRefused(Exception):
    """A reload that cannot be run as asked; the message says why."""


@dataclass(frozen=True)
class ReloadDay:
    """One day of a reload's preview: what the calendar says of it, its bars now, the
    load that covers it already (if one does), and whether the reload fetches it."""

    day: date
    calendar: str  # open, closed, unknown
    bars: int
    covered_by: DayLoad | None

    @property
    def fetched(self) -> bool:
        return self.calendar == "open" and self.covered_by is None


@dataclass
class ReloadPreview:
    """What a reload of ``days`` would do. Unlike a gap-fill it takes the days that have
    bars too: the load upserts, so a restatement arrives and unchanged bars write nothing."""

    feed: MarketFeed
    days: list[date]  # the days asked for, newest first
    is_open: dict[date, bool] = field(default_factory=dict)  # the days the calendar knows
    bars: dict[date, int] = field(default_factory=dict)
    covered: dict[date, DayLoad] = field(default_factory=dict)  # already being loaded

    @property
    def start(self) -> date:
        return self.days[-1]

    @property
    def end(self) -> date:
        return self.days[0]

    @property
    def rows(self) -> list[ReloadDay]:
        return [
            ReloadDay(
                day,
                "unknown" if day not in self.is_open else "open" if self.is_open[day] else "closed",
                self.bars.get(day, 0),
                self.covered.get(day),
            )
            for day in self.days
        ]

    @property
    def trading(self) -> list[date]:
        return [day for day in self.days if self.is_open.get(day)]

    @property
    def unknown(self) -> list[date]:
        return [day for day in self.days if day not in self.is_open]

    @property
    def to_fetch(self) -> list[date]:
        """The open days no load covers, newest first: one API call each."""
        return [day for day in self.trading if day not in self.covered]

    @property
    def api_calls(self) -> int:
        return len(self.to_fetch)

    def refusal(self) -> str:
        """Why the reload would be refused as it stands ("" if it would not be)."""
        if self.unknown:
            return (
                f"the calendar does not know {listed(self.unknown)} yet: the daily batch loads it "
                "(or run one)"
            )
        if not self.to_fetch:
            if self.covered:
                return f"nothing to reload: a load covers each open day chosen ({listed(self.covered)})"
            return "nothing to reload: no day chosen is a trading day"
        return ""


def listed(days: Any, most: int = 10) -> str:
    """Days for a message, newest first: the first ``most`` named, the rest counted."""
    ordered = sorted(days, reverse=True)
    named = ", ".join(day.isoformat() for day in ordered[:most])
    return named + (f" and {len(ordered) - most} more" if len(ordered) > most else "")


def days_between(start: date, end: date) -> list[date]:
    """Every day of ``start`` … ``end``, newest first. Refused: an empty range, or one
    longer than a reload may be (``MARKET_BACKFILL_MAX_DAYS``)."""
    if start > end:
        raise ReloadRefused(f"the range starts ({start}) after it ends ({end})")
    _within_longest(start, end)
    return [end - timedelta(days=n) for n in range((end - start).days + 1)]


def _within_longest(first: date, last: date) -> None:
    longest = int(conf.get("MARKET_BACKFILL_MAX_DAYS"))
    if (last - first).days + 1 > longest:
        raise ReloadRefused(
            f"the days span {(last - first).days + 1} days ({first} … {last}); at most {longest} "
            "days per reload"
        )


def preview_reload(feed: MarketFeed, days: Any, *, today: date | None = None) -> ReloadPreview:
    """Each of ``days``: whether it is a trading day, the bars it has, the load covering
    it. Refused: no day, a day in the future, days spanning more than
    ``MARKET_BACKFILL_MAX_DAYS``."""
    today = today or freshness.market_date(jobs.now())
    chosen = sorted(set(days), reverse=True)
    if not chosen:
        raise ReloadRefused("no day chosen")
    if chosen[0] > today:
        raise ReloadRefused(f"{chosen[0]} is in the future (the market's today is {today})")
    _within_longest(chosen[-1], chosen[0])
    is_open = dict(
        TradingDay.objects.filter(feed=feed, exchange=feed.exchange, cal_date__in=chosen).values_list(
            "cal_date", "is_open"
        )
    )
    bars = dict(
        DailyBar.objects.filter(feed=feed, trade_date__in=chosen)
        .order_by()
        .values("trade_date")
        .annotate(n=Count("*"))
        .values_list("trade_date", "n")
    )
    return ReloadPreview(feed, chosen, is_open, bars, batch.covering(feed, chosen))


def reload(
    feed: MarketFeed, days: Any, *, actor: Any, via: str, reason: str
) -> tuple[ReloadPreview, list[DayLoad]]:
    """Load the open days of ``days`` again, whether or not they have bars, each that no
    load covers already, at the backfill's priority; recorded as a ``reload`` action
    with who asked, through which door and why (a reason is required). All or nothing:
    a refused reload writes nothing."""
    reason = reason.strip()
    if not reason:
        raise ReloadRefused("a reload needs a reason (it is kept in the feed's history)")
    if len(reason) > REASON_MAX_CHARS:
        raise ReloadRefused(f"the reason is {len(reason)} characters; at most {REASON_MAX_CHARS}")
    preview = preview_reload(feed, days)
    refusal = preview.refusal()
    if refusal:
        raise ReloadRefused(refusal)
    with transaction.atomic():
        loads = batch.queue_loads(
            feed,
            preview.to_fetch,
            LoadTrigger.RELOAD,
            priority=int(conf.get("MARKET_BACKFILL_PRIORITY")),
            actor=actor,
        )
        queued = {load.trade_date for load in loads}
        MarketAction.objects.create(
            feed=feed,
            kind="reload",
            actor=actor if getattr(actor, "is_authenticated", False) else None,
            via=via,
            at=jobs.now(),
            message=reason,
            detail={
                "days": [day.isoformat() for day in preview.days],
                "queued": [load.trade_date.isoformat() for load in loads],
                "covered": {
                    day.isoformat(): load.pk
                    for day, load in {**preview.covered, **batch.covering(feed, preview.to_fetch)}.items()
                    if day not in queued
                },
                "closed": [row.day.isoformat() for row in preview.rows if row.calendar == "closed"],
            },
        )
    return preview, loads


def follow_load_operator(job: jobs.Job, action: str, actor: Any, via: str) -> None:
    """``market.LoadDay``'s operator hook (the engine calls it in the transaction of an
    operator's action on the job): a job run again runs its load again. The load, if it
    has ended, is queued again (its error and end cleared) and a batch it had failed
    reopens (``batch.reopen``), recorded on the feed with the actor and the door; else
    the job would skip a load that ended and succeed without loading anything. Refused
    while another load of the day is queued or running: they would load it together."""
    if action not in RUNS_AGAIN or job.tenant_id is None:
        return
    loads = DayLoad.objects.filter(pk=job.payload.get("load"), feed__tenant_id=job.tenant_id)
    # A recovered job's handler may be running: it writes the load before it touches its
    # job's row, so the load is not locked here, under the job's row, unless it has ended.
    # Any other action's job has no handler running, and the lock is what orders this
    # with the sweep that fails a load whose job ended (``batch.settle_stuck``).
    if action == "recover" and not loads.exclude(status__in=[LoadStatus.QUEUED, LoadStatus.RUNNING]).exists():
        return
    load = loads.select_for_update(of=("self",)).select_related("feed").first()
    if load is None or load.status in (LoadStatus.QUEUED, LoadStatus.RUNNING):
        return
    other = batch.covering(load.feed, [load.trade_date]).get(load.trade_date)
    if other is None:
        try:
            with transaction.atomic():
                DayLoad.objects.filter(pk=load.pk).update(
                    status=LoadStatus.QUEUED, error="", rows=None, finished_at=None
                )
        except IntegrityError:
            other = batch.covering(load.feed, [load.trade_date]).get(load.trade_date)
            if other is None:
                raise
    if other is not None:
        raise jobs.IllegalTransition(
            f"job {job.pk} cannot {action.replace('_', ' ')}: its load {load.pk} of {load.trade_date} "
            f"would run beside load {other.pk} of the same day (job {other.job_id}, {other.status}); "
            "let that one end first"
        )
    name = actor.get_username() if getattr(actor, "is_authenticated", False) else ""
    asked = action.replace("_", " ") + (f" by {name}" if name else "") + (f" via {via}" if via else "")
    reopened = batch.reopen(load, job.pk, why=f"the load of {load.trade_date} runs again ({asked})")
    MarketAction.objects.create(
        feed=load.feed,
        kind=f"load_{action}",
        from_status=load.status,
        to_status=LoadStatus.QUEUED,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        via=via,
        at=jobs.now(),
        message=f"the load of {load.trade_date} runs again with job {job.pk}",
        detail={
            "load": load.pk,
            "trade_date": load.trade_date.isoformat(),
            "job": job.pk,
            "was": load.error[:REASON_MAX_CHARS],
            **({"batch": load.batch_id} if reopened else {}),
        },
    )


def _latest_due_trading_day(feed: MarketFeed, now: datetime) -> date | None:
    """The latest open day of the feed's calendar whose batch was due by ``now`` (today
    once 18:30 has passed in the market, else the open day before): the day whose row
    count says whether the data is whole. None without a calendar."""
    today = freshness.market_date(now)
    last = today if now >= batch.due_at(today) else today - timedelta(days=1)
    return (
        TradingDay.objects.filter(feed=feed, exchange=feed.exchange, is_open=True, cal_date__lte=last)
        .order_by("-cal_date")
        .values_list("cal_date", flat=True)
        .first()
    )


@dataclass(frozen=True)
class Finding:
    ok: bool
    check: str
    detail: str

    def line(self) -> str:
        return f"{'OK' if self.ok else 'ALERT'} {self.check}: {self.detail}"


def check(feeds: Any, now: datetime) -> list[Finding]:
    """The watchdog's checks of each feed: its latest daily date is recent enough, no
    source's last attempt failed, the latest trading day has enough rows, and no open
    day before the look-back lacks its bars (``old_gaps``; with no bars at all, there is
    no history to have gaps in)."""
    findings = []
    max_age = int(conf.get("MARKET_CHECK_MAX_AGE_DAYS"))
    min_rows = int(conf.get("MARKET_CHECK_MIN_ROWS"))
    today = freshness.market_date(now)
    for feed in feeds:
        name = f"{feed.tenant.slug}/{feed.name}"  # feed names repeat across tenants
        latest = DailyBar.objects.filter(feed=feed).aggregate(day=Max("trade_date"))["day"]
        if latest is None:
            findings.append(Finding(False, f"{name} latest-daily", "no daily bars at all"))
        else:
            age = (today - latest).days
            findings.append(
                Finding(
                    age <= max_age,
                    f"{name} latest-daily",
                    f"latest trade date {latest}, {age} day(s) ago (at most {max_age})",
                )
            )
        failing = SourceFreshness.objects.filter(feed=feed, last_failure__isnull=False)
        failed = [row for row in failing if row.last_success is None or row.last_failure > row.last_success]
        for row in failed:
            # On one line: a multi-line error must not break one line per finding (nor
            # leave unstamped lines in the log).
            error = " ".join(row.last_error.split())[:200]
            findings.append(
                Finding(
                    False,
                    f"{name} {row.dataset}",
                    f"last attempt failed at {row.last_failure:%Y-%m-%d %H:%M} UTC: {error}",
                )
            )
        if not failed:
            findings.append(Finding(True, f"{name} last-attempts", "no source's last attempt failed"))
        counted = _latest_due_trading_day(feed, now) or latest
        if counted is not None:
            rows = DailyBar.objects.filter(feed=feed, trade_date=counted).aggregate(n=Count("pk"))["n"]
            findings.append(
                Finding(
                    rows >= min_rows,
                    f"{name} row-count",
                    f"{rows:,} rows on {counted} (at least {min_rows:,})",
                )
            )
        old = old_gaps(feed, today)
        if old is not None:
            findings.append(Finding(not old.days, f"{name} old-gaps", old.describe()))
    return findings
