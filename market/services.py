"""What operators, the API and the commands do with market data: see how fresh each source
is, preview and run a gap-fill, and check the data as the watchdog does."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Max

import jobs
from market import batch, conf, freshness
from market.models import (
    DailyBar,
    Dataset,
    DayLoad,
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


def source_statuses(feeds: Any, now: datetime) -> list[SourceStatus]:
    """Each dataset of each of ``feeds``, with its computed status; a dataset never
    attempted is ``never_ingested``."""
    rows = {(row.feed_id, row.dataset): row for row in SourceFreshness.objects.filter(feed__in=feeds)}
    statuses = []
    for feed in feeds:
        for dataset in Dataset.values:
            row = rows.get((feed.pk, dataset))
            if row is None:
                statuses.append(SourceStatus(feed.name, dataset, freshness.NEVER_INGESTED, None, None, "", 0))
                continue
            statuses.append(
                SourceStatus(
                    feed.name,
                    dataset,
                    freshness.status(row.last_success, row.last_failure, now),
                    row.last_success,
                    row.last_failure,
                    row.last_error,
                    freshness.rows_today(row, now),
                )
            )
    return statuses


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
    source's last attempt failed, and the latest trading day has enough rows."""
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
    return findings
