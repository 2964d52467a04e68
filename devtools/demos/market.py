"""The market-data demo (``manage.py demo market --api-url URL``): a market-data feed for
a new user, against the fake market-data API that ``./conveyor start`` runs
(``devtools/fakes/market_api.py``), loaded the way the daily batch and an operator load
it: today's batch (calendar, instruments, and its gap-fill of the last 3 missing trading
days), then a gap-fill of the look-back's other days, so that the freshness board starts
healthy and a day deleted from it can be healed.

Runs the jobs in this process, so the data is there when it returns. Idempotent: a feed
that already has bars is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError
from django.db import transaction

import jobs
from market import batch, conf, freshness, services
from market.models import DailyBar, DailyBatch, MarketFeed
from tenancy.models import Tenant

FEED = "demo-market"


def load(write: Callable[[str], Any], *, actor: Any, api_url: str, token: str) -> None:
    """Create the demo market-data feed on ``api_url`` and load its last week."""
    feed = _feed(api_url, token)
    if DailyBar.objects.filter(feed=feed).exists():
        write("The market demo is already loaded.")
        return
    now = jobs.now()
    today = freshness.market_date(now)
    with transaction.atomic():
        if not DailyBatch.objects.filter(feed=feed, market_date=today).exists():
            batch.start(feed, today, now=now, actor=actor)
    _run()
    lookback = int(conf.get("MARKET_GAP_LOOKBACK_DAYS"))
    try:
        _, loads = services.gap_fill(
            feed, today - timedelta(days=lookback), today, actor=actor, via="command"
        )
    except services.GapFillRefused as refused:
        raise CommandError(f"the demo's gap-fill was refused: {refused}") from refused
    _run()
    days = DailyBar.objects.filter(feed=feed).values("trade_date").distinct().count()
    if not days:
        raise CommandError(f"the demo feed loaded no bars from {api_url}: see its freshness in the admin")
    write(f"Market demo: feed {FEED} has {days} trading day(s) of bars ({len(loads)} filled by a gap-fill).")


def _run() -> None:
    while jobs.run_until_idle():
        pass


def _feed(api_url: str, token: str) -> MarketFeed:
    tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo organisation"})
    feed, created = MarketFeed.objects.get_or_create(
        tenant=tenant, name=FEED, defaults={"api_url": api_url, "token": token}
    )
    if not created and (feed.api_url, feed.token) != (api_url, token):
        MarketFeed.objects.filter(pk=feed.pk).update(api_url=api_url, token=token)
        feed.refresh_from_db()
    return feed
