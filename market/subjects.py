"""What the market jobs work for: the day load, the daily batch or the feed
(``console.admin.register_job_subject``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse

import jobs
from console.admin import Subject, SubjectAction
from market import batch
from market.models import DailyBatch, DayLoad, LoadStatus, MarketFeed
from tenancy.scoping import scope_queryset

LOAD_JOBS = [batch.LOAD_DAY]
BATCH_JOBS = [batch.PLAN_BATCH, batch.FINISH_BATCH]
FEED_JOBS = [batch.LOAD_CALENDAR, batch.LOAD_INSTRUMENTS]


def _ids(found: Sequence[jobs.Job], key: str) -> dict[int, int]:
    """Job id → the id its payload names under ``key``."""
    named = {}
    for job in found:
        value = job.payload.get(key) if isinstance(job.payload, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            named[job.pk] = value
    return named


def load_subjects(request: HttpRequest, found: Sequence[jobs.Job], detail: bool) -> Mapping[int, Subject]:
    named = _ids(found, "load")
    loads = scope_queryset(DayLoad.objects.select_related("feed"), request.user, "feed__tenant")
    by_id = {load.pk: load for load in loads.filter(pk__in=set(named.values()))}
    may_fill = detail and admin.site.get_model_admin(MarketFeed).has_operate_permission(request)  # type: ignore[attr-defined]
    subjects = {}
    for job in found:
        load = by_id.get(named.get(job.pk, 0))
        if load is None or load.feed.tenant_id != job.tenant_id:
            continue
        subjects[job.pk] = _load_subject(job, load, may_fill)
    return subjects


def _load_subject(job: jobs.Job, load: DayLoad, may_fill: bool) -> Subject:
    feed_url = reverse("admin:market_marketfeed_change", args=[load.feed_id])
    failed = load.status == LoadStatus.FAILED
    actions: tuple[SubjectAction, ...] = ()
    if failed and may_fill:
        # A gap-fill of the one day: a new load, as the feed's board would start it.
        day = load.trade_date.isoformat()
        actions = (
            SubjectAction(
                f"Load {day} again",
                reverse("admin:market_marketfeed_gap_fill", args=[load.feed_id]),
                {"start": day, "end": day},
            ),
        )
    return Subject(
        f"Day load {load.trade_date:%Y-%m-%d} of feed {load.feed.name}",
        reverse("admin:market_dayload_change", args=[load.pk]),
        (("feed", feed_url),),
        message=load.error if failed else "",
        actions=actions,
        replaces_retry="retrying this job alone would not load the day: the load has ended"
        if failed and job.state == "failed"
        else "",
    )


def batch_subjects(request: HttpRequest, found: Sequence[jobs.Job], detail: bool) -> Mapping[int, Subject]:
    named = _ids(found, "batch")
    batches = scope_queryset(DailyBatch.objects.select_related("feed"), request.user, "feed__tenant")
    by_id = {row.pk: row for row in batches.filter(pk__in=set(named.values()))}
    subjects = {}
    for job in found:
        row = by_id.get(named.get(job.pk, 0))
        if row is not None and row.feed.tenant_id == job.tenant_id:
            subjects[job.pk] = Subject(
                f"Daily batch {row.market_date:%Y-%m-%d} of feed {row.feed.name}",
                reverse("admin:market_dailybatch_change", args=[row.pk]),
            )
    return subjects


def feed_subjects(request: HttpRequest, found: Sequence[jobs.Job], detail: bool) -> Mapping[int, Subject]:
    named = _ids(found, "feed")
    feeds = scope_queryset(MarketFeed.objects.all(), request.user)
    by_id = {feed.pk: feed for feed in feeds.filter(pk__in=set(named.values()))}
    subjects = {}
    for job in found:
        feed = by_id.get(named.get(job.pk, 0))
        if feed is not None and feed.tenant_id == job.tenant_id:
            subjects[job.pk] = Subject(
                f"Feed {feed.name}", reverse("admin:market_marketfeed_change", args=[feed.pk])
            )
    return subjects
