"""Market data and how fresh it is.

A ``MarketFeed`` is a tenant's market-data API (an endpoint and a token). Its three
datasets are normalised into tables keyed as the API keys them, so that every load is
an upsert: ``TradingDay`` (the exchange's calendar), ``Instrument`` (the listed,
delisted and paused instruments) and ``DailyBar`` (one row per instrument and trading
day). ``SourceFreshness`` says when each dataset last loaded and last failed.

A ``DailyBatch`` is the scheduled run of one market date (or the record that it was
missed); a ``DayLoad`` the loading of one day's bars, by the batch, its gap-fill or an
operator. At most one load of a day is queued or running at a time (a partial unique
index), which is what "a run already covers it" means. ``MarketAction`` records what
operators did.

The tables keep the names they were created with while market data was a part of the
ingest app (``db_table``: ``ingest_marketfeed`` …): the app moved, its rows stayed where
they were (``market/migrations/0001_initial.py``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

import jobs


class Dataset(models.TextChoices):
    """The API's names for the three datasets."""

    CALENDAR = "trade_cal", "trading calendar"
    INSTRUMENTS = "stock_basic", "instruments"
    DAILY = "daily", "daily bars"


class ListStatus(models.TextChoices):
    LISTED = "L", "listed"
    DELISTED = "D", "delisted"
    PAUSED = "P", "paused"


class MarketFeed(models.Model):
    """A tenant's market-data API: where to call it, with which token, for which exchange's
    calendar."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+"
    )
    name = models.SlugField(
        "name", max_length=100, help_text="Unique within the tenant; commands and the API use it."
    )
    api_url = models.URLField("API URL", max_length=500)
    token = models.CharField("token", max_length=200, help_text="Sent in every call's body.")
    exchange = models.CharField(
        "calendar exchange",
        max_length=10,
        default="SSE",
        help_text="Whose trading calendar decides the trading days.",
    )
    enabled = models.BooleanField(
        "enabled", default=True, help_text="A disabled feed is skipped by the daily batch."
    )
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        permissions = [("operate_marketfeed", "Can operate market feeds (gap-fill, reload)")]
        db_table = "ingest_marketfeed"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="market_feed_name_per_tenant"),
            models.CheckConstraint(name="market_feed_name_not_empty", condition=~Q(name="")),
        ]

    def __str__(self) -> str:
        return self.name


class TradingDay(models.Model):
    feed = models.ForeignKey(MarketFeed, on_delete=models.CASCADE, related_name="+")
    exchange = models.CharField("exchange", max_length=10)
    cal_date = models.DateField("date")
    is_open = models.BooleanField("open")
    pretrade_date = models.DateField("previous trading day", null=True, blank=True)

    class Meta:
        db_table = "ingest_tradingday"
        ordering = ["-cal_date"]
        constraints = [
            models.UniqueConstraint(fields=["feed", "exchange", "cal_date"], name="market_trading_day_key"),
        ]

    def __str__(self) -> str:
        return f"{self.exchange} {self.cal_date} ({'open' if self.is_open else 'closed'})"


class Instrument(models.Model):
    feed = models.ForeignKey(MarketFeed, on_delete=models.CASCADE, related_name="+")
    ts_code = models.CharField("code", max_length=20)
    symbol = models.CharField("symbol", max_length=20, blank=True)
    name = models.CharField("name", max_length=100, blank=True)
    area = models.CharField("area", max_length=50, blank=True)
    industry = models.CharField("industry", max_length=50, blank=True)
    market = models.CharField("market", max_length=20, blank=True)
    list_status = models.CharField("listing", max_length=1, choices=ListStatus.choices)
    list_date = models.DateField("listed", null=True, blank=True)
    delist_date = models.DateField("delisted", null=True, blank=True)

    class Meta:
        db_table = "ingest_instrument"
        ordering = ["ts_code"]
        constraints = [
            models.UniqueConstraint(fields=["feed", "ts_code"], name="market_instrument_key"),
            models.CheckConstraint(
                name="market_instrument_status_valid", condition=Q(list_status__in=ListStatus.values)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.ts_code} {self.name}".strip()


class DailyBar(models.Model):
    """One instrument's trading day, as the API gives it (prices in the instrument's
    currency, ``vol`` in lots, ``amount`` in thousands)."""

    feed = models.ForeignKey(
        MarketFeed, on_delete=models.CASCADE, related_name="+", db_index=False
    )  # the key below leads with it
    ts_code = models.CharField("code", max_length=20)
    trade_date = models.DateField("trade date")
    open = models.FloatField("open")
    high = models.FloatField("high")
    low = models.FloatField("low")
    close = models.FloatField("close")
    pre_close = models.FloatField("previous close", null=True, blank=True)
    change = models.FloatField("change", null=True, blank=True)
    pct_chg = models.FloatField("change %", null=True, blank=True)
    vol = models.FloatField("volume", null=True, blank=True)
    amount = models.FloatField("amount", null=True, blank=True)

    class Meta:
        db_table = "ingest_dailybar"
        ordering = ["-trade_date", "ts_code"]
        constraints = [
            models.UniqueConstraint(fields=["feed", "trade_date", "ts_code"], name="market_daily_bar_key"),
            models.CheckConstraint(name="market_daily_bar_range", condition=Q(low__lte=models.F("high"))),
        ]

    def __str__(self) -> str:
        return f"{self.ts_code} {self.trade_date}"


class SourceFreshness(models.Model):
    """When a feed's dataset last loaded, last failed and why, and how many rows it wrote
    on ``rows_date`` (the market date of its last success)."""

    feed = models.ForeignKey(
        MarketFeed, on_delete=models.CASCADE, related_name="freshness", db_index=False
    )  # the key below leads with it
    dataset = models.CharField("dataset", max_length=20, choices=Dataset.choices)
    last_success = models.DateTimeField("last success", null=True, blank=True)
    last_failure = models.DateTimeField("last failure", null=True, blank=True)
    last_error = models.TextField("last error", blank=True)
    rows_today = models.PositiveIntegerField("rows today", default=0)
    rows_date = models.DateField("rows on", null=True, blank=True)

    class Meta:
        db_table = "ingest_sourcefreshness"
        ordering = ["feed", "dataset"]
        verbose_name_plural = "source freshness"
        constraints = [
            models.UniqueConstraint(fields=["feed", "dataset"], name="market_freshness_key"),
            models.CheckConstraint(
                name="market_freshness_dataset_valid", condition=Q(dataset__in=Dataset.values)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.feed} {self.dataset}"


class BatchStatus(models.TextChoices):
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    MISSED = "missed", "missed"


class DailyBatch(models.Model):
    """The daily batch of one market date: run once, or recorded as missed when the
    cluster came back after the misfire grace."""

    feed = models.ForeignKey(
        MarketFeed, on_delete=models.CASCADE, related_name="batches", db_index=False
    )  # the key below leads with it
    market_date = models.DateField("market date")
    status = models.CharField("status", max_length=10, choices=BatchStatus.choices)
    due_at = models.DateTimeField("due")
    started_at = models.DateTimeField("started", null=True, blank=True)
    finished_at = models.DateTimeField("finished", null=True, blank=True)
    gaps = models.JSONField(
        "gaps found",
        default=list,
        blank=True,
        help_text="Open days of the look-back with no bars, newest first.",
    )
    note = models.TextField("note", blank=True)

    class Meta:
        db_table = "ingest_dailybatch"
        ordering = ["-market_date"]
        verbose_name_plural = "daily batches"
        constraints = [
            models.UniqueConstraint(fields=["feed", "market_date"], name="market_batch_once_a_day"),
            models.CheckConstraint(
                name="market_batch_status_valid", condition=Q(status__in=BatchStatus.values)
            ),
            models.CheckConstraint(
                name="market_batch_finished_when_done",
                condition=Q(status="running", finished_at__isnull=True)
                | (~Q(status="running") & Q(finished_at__isnull=False)),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.feed} batch of {self.market_date}"


class LoadTrigger(models.TextChoices):
    SCHEDULE = "schedule", "the daily batch"
    GAP_FILL = "gap_fill", "the daily batch's gap-fill"
    OPERATOR = "operator", "an operator's gap-fill"
    RELOAD = "reload", "an operator's reload"
    REFETCH = "refetch", "the daily batch's re-fetch"


class LoadStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"


ACTIVE_LOAD = Q(status__in=[LoadStatus.QUEUED, LoadStatus.RUNNING])


class DayLoad(models.Model):
    """Loading one trading day's bars: queued by the daily batch (today, or a gap it found)
    or by an operator, run by an engine job that retries transient failures."""

    feed = models.ForeignKey(
        MarketFeed, on_delete=models.CASCADE, related_name="loads", db_index=False
    )  # the indexes below lead with it
    trade_date = models.DateField("trade date")
    trigger = models.CharField("by", max_length=10, choices=LoadTrigger.choices)
    batch = models.ForeignKey(
        DailyBatch, on_delete=models.SET_NULL, null=True, blank=True, related_name="loads"
    )
    status = models.CharField("status", max_length=10, choices=LoadStatus.choices, default=LoadStatus.QUEUED)
    job_id = models.BigIntegerField(
        "job",
        null=True,
        blank=True,
        help_text="The engine job that loads it (no foreign key: retention prunes jobs).",
    )
    rows = models.PositiveIntegerField("rows", null=True, blank=True)
    error = models.TextField("error", blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="requested by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField("queued")
    finished_at = models.DateTimeField("finished", null=True, blank=True)

    class Meta:
        db_table = "ingest_dayload"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["feed", "trade_date"], name="market_load_by_day")]
        constraints = [
            # A day is loaded by one load at a time: a second request finds the first.
            models.UniqueConstraint(
                fields=["feed", "trade_date"], condition=ACTIVE_LOAD, name="market_load_one_active_per_day"
            ),
            models.CheckConstraint(
                name="market_load_status_valid", condition=Q(status__in=LoadStatus.values)
            ),
            models.CheckConstraint(
                name="market_load_trigger_valid", condition=Q(trigger__in=LoadTrigger.values)
            ),
        ]

    def __str__(self) -> str:
        return f"load of {self.trade_date}"


class MarketAction(jobs.History):
    """An operator's action on a feed, with who did it and what it asked for (``detail``)."""

    feed = models.ForeignKey(MarketFeed, on_delete=models.CASCADE, related_name="actions")
    kind = models.CharField("what", max_length=30)

    class Meta:
        db_table = "ingest_marketaction"
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor} at {self.at:%Y-%m-%d %H:%M}"
