"""An operator in a real browser opens the market data's freshness board from the feeds'
list, reads the coloured statuses and the calendar strip, previews a gap-fill of the last
week and confirms it, and finds the days it queued marked as loading.

The web process runs on the real clock: the set-up is dated from the market's today.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobs
from market import freshness
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
from tests.browser.conftest import Site, log_in, needs_chromium, screenshots
from tests.support.base import tenant

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]

GREEN, RED = "rgb(47, 133, 90)", "rgb(197, 48, 48)"


def test_an_operator_previews_and_confirms_a_gap_fill_from_the_board(site: Site, page):
    now = jobs.now()
    today = freshness.market_date(now)
    feed = MarketFeed.objects.create(
        tenant=tenant("Acme"),
        name="cn-equities",
        api_url="http://market.test/api",
        token="tok-secret-browser-0001",
    )
    fortnight = [today - timedelta(days=n) for n in range(14)]
    TradingDay.objects.bulk_create(
        TradingDay(feed=feed, exchange=feed.exchange, cal_date=day, is_open=day.weekday() < 5)
        for day in fortnight
    )
    open_days = [day for day in fortnight if day.weekday() < 5 and day < today]
    gaps = open_days[:2]  # the two latest open days before today have no bars
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code="600000.SH", trade_date=day, open=10, high=11, low=9, close=10.5)
        for day in open_days
        if day not in gaps
    )
    SourceFreshness.objects.create(feed=feed, dataset=Dataset.CALENDAR, last_success=now - timedelta(hours=1))
    SourceFreshness.objects.create(
        feed=feed,
        dataset=Dataset.DAILY,
        last_success=now - timedelta(days=1),
        last_failure=now - timedelta(hours=1),
        last_error="daily: HTTP 503 from the API",
    )
    expected = [
        day
        for day in fortnight
        if day.weekday() < 5 and day >= today - timedelta(days=6) and (day in gaps or day == today)
    ]

    operator = log_in(page, site)
    page.goto(f"{site.url}/admin/market/marketfeed/")
    page.click("#market-board-link")
    board = page.locator(f"#feed-{feed.pk}")
    healthy = board.locator('tr[data-dataset="trade_cal"] .market-status')
    failing = board.locator('tr[data-dataset="daily"] .market-status')
    assert (healthy.inner_text(), failing.inner_text()) == ("healthy", "error")
    assert healthy.evaluate("el => getComputedStyle(el).backgroundColor") == GREEN
    assert failing.evaluate("el => getComputedStyle(el).backgroundColor") == RED
    assert "daily: HTTP 503 from the API" in board.inner_text()
    legend = page.inner_text("#market-legend")
    for label in ("filled", "missing", "non-trading", "unknown", "loading"):
        assert label in legend
    assert board.locator(".market-strip .market-day").count() == 30
    gap = board.locator(f'.market-day[data-date="{gaps[0]}"]')
    assert gap.get_attribute("data-state") == "missing"
    assert gap.evaluate("el => getComputedStyle(el).backgroundColor") == RED
    screenshots(page, "market-board")

    board.locator("button:text-is('Preview')").click()
    page.wait_for_selector("#gap-fill-preview")
    assert page.locator("#gap-fill-days li").all_inner_texts() == [f"{day:%a %Y-%m-%d}" for day in expected]
    assert page.inner_text("#gap-fill-api-calls") == str(len(expected))
    screenshots(page, "market-gap-fill-preview")
    page.click("#gap-fill-confirm button")

    page.wait_for_selector(".messagelist .success")
    assert page.inner_text(".messagelist") == (
        f"Gap-fill of cn-equities: queued {len(expected)} day(s): "
        f"{', '.join(day.isoformat() for day in expected)}."
    )
    for day in expected:
        cell = page.locator(f'#feed-{feed.pk} .market-day[data-date="{day}"]')
        assert cell.get_attribute("data-loading") == "1"
        assert "loading" in cell.get_attribute("title")
    assert sorted(
        DayLoad.objects.filter(trigger=LoadTrigger.OPERATOR, requested_by=operator).values_list(
            "trade_date", flat=True
        )
    ) == sorted(expected)
    assert MarketAction.objects.get().actor == operator
    screenshots(page, "market-board-gap-filled")


def test_an_operator_reloads_days_that_have_bars_from_the_board(site: Site, page):
    now = jobs.now()
    today = freshness.market_date(now)
    feed = MarketFeed.objects.create(
        tenant=tenant("Acme"),
        name="cn-equities",
        api_url="http://market.test/api",
        token="tok-secret-browser-0002",
    )
    week = [today - timedelta(days=n) for n in range(7)]
    TradingDay.objects.bulk_create(
        TradingDay(feed=feed, exchange=feed.exchange, cal_date=day, is_open=day.weekday() < 5) for day in week
    )
    open_days = [day for day in week if day.weekday() < 5]
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code=f"60000{n}.SH", trade_date=day, open=10, high=11, low=9, close=10.5)
        for day in open_days
        for n in range(3)
    )

    operator = log_in(page, site)
    page.goto(f"{site.url}/admin/market/marketfeed/board/")
    page.locator(f"#feed-{feed.pk} .market-reload-link").click()
    page.wait_for_selector("#reload-form")
    page.click("#reload-form button[name=preview]")
    page.wait_for_selector("#reload-preview")
    rows = page.locator("#reload-days tbody tr")
    assert rows.count() == len(week)
    ticked = page.locator("#reload-days input[type=checkbox]:checked")
    assert sorted(ticked.evaluate_all("els => els.map(el => el.value)")) == sorted(
        d.isoformat() for d in open_days
    )
    assert page.inner_text("#reload-api-calls") == str(len(open_days))
    screenshots(page, "market-reload-preview")

    keep = sorted(open_days)[-1]  # only the latest day is reloaded: the others untick
    for day in open_days:
        if day != keep:
            page.uncheck(f"#reload-days input[value='{day.isoformat()}']")
    page.fill("#reload-confirm input[name=reason]", "the API restated the close")
    page.click("#reload-confirm button[type=submit]")

    page.wait_for_selector(".messagelist .success")
    assert page.inner_text(".messagelist") == f"Reload of cn-equities: queued 1 day(s): {keep.isoformat()}."
    load = DayLoad.objects.get()
    assert (load.trade_date, load.trigger, load.requested_by) == (keep, LoadTrigger.RELOAD, operator)
    action = MarketAction.objects.get()
    assert (action.kind, action.actor, action.message) == ("reload", operator, "the API restated the close")
    screenshots(page, "market-board-reloaded")
