"""The operators' reload of chosen days, whether or not they have bars: its admin page (a
preview of each day of a range, then a confirmation with a required reason) and
``manage.py market_reload``, both through ``services.reload``, both recorded as a
``reload`` action; a refused reload writes nothing.

The engine's clock stands at Monday 2026-11-02 17:00 in Shanghai: the market's today.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client

from market import batch
from market.models import DailyBar, DayLoad, LoadStatus, LoadTrigger, MarketAction, MarketFeed, TradingDay
from tests.support.base import granted, page, staff, tenant

pytestmark = pytest.mark.django_db

FEEDS = "/admin/market/marketfeed/"
BOARD = f"{FEEDS}board/"
MONDAY = date(2026, 11, 2)
FRIDAY = date(2026, 10, 30)
ROWS = {date(2026, 10, 28): 3, date(2026, 10, 29): 2, FRIDAY: 4, MONDAY: 5}


def browser(user: User, *codenames: str) -> Client:
    granted = Permission.objects.filter(content_type__app_label="market")
    user.user_permissions.set(granted.filter(codename__in=codenames) if codenames else granted)
    client = Client()
    client.force_login(user)
    return client


def reload_url(feed: MarketFeed) -> str:
    return f"{FEEDS}{feed.pk}/reload/"


@pytest.fixture
def feed(acme) -> MarketFeed:
    feed = MarketFeed.objects.create(
        tenant=acme, name="cn-equities", api_url="http://market.test/api", token="t"
    )
    # The calendar of Tuesday 27 October to Monday 2 November (the weekend closed), with
    # bars on every open day but the 27th.
    TradingDay.objects.bulk_create(
        TradingDay(feed=feed, exchange=feed.exchange, cal_date=day, is_open=day.weekday() < 5)
        for day in (date(2026, 10, 27) + timedelta(days=n) for n in range(7))
    )
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code=f"{600000 + n}.SH", trade_date=day, open=10, high=11, low=9, close=10.5)
        for day, count in ROWS.items()
        for n in range(count)
    )
    return feed


@pytest.fixture
def alice(acme) -> User:
    return staff("alice", of=acme)


def ticked(html: str) -> list[str]:
    return re.findall(r'<input type="checkbox" name="day" value="([\d-]+)"[^>]*checked>', html)


# --- the admin page -----------------------------------------------------------------------------


def test_the_preview_lists_each_day_with_its_calendar_bars_and_covering_load(clock, alice, feed):
    (covering,) = batch.queue_loads(feed, [FRIDAY], LoadTrigger.SCHEDULE)

    html = page(browser(alice), f"{reload_url(feed)}?start=2026-10-27&end=2026-11-02")

    preview = html[html.index('id="reload-preview"') :]
    assert 'data-api-calls="4"' in preview  # the open days but Friday, which a load covers
    assert ticked(preview) == ["2026-11-02", "2026-10-29", "2026-10-28", "2026-10-27"]
    calendar = dict(re.findall(r'<tr data-date="([\d-]+)" data-calendar="(\w+)">', preview))
    assert calendar["2026-10-31"] == calendar["2026-11-01"] == "closed"
    assert calendar["2026-10-30"] == "open"
    friday = preview[preview.index('data-date="2026-10-30"') :]
    assert f'href="/admin/market/dayload/{covering.pk}/change/"' in friday[: friday.index("</tr>")]
    assert 'id="reload-confirm"' in preview and 'name="reason"' in preview
    assert DayLoad.objects.count() == 1 and not MarketAction.objects.exists()  # a dry run


def test_confirming_reloads_the_days_ticked_for_the_user_and_records_why(clock, alice, feed):
    client = browser(alice)

    response = client.post(
        reload_url(feed),
        {
            "start": "2026-10-27",
            "end": "2026-11-02",
            "day": ["2026-11-02", "2026-10-30"],
            "reason": "restated",
        },
    )

    assert response.status_code == 302 and response["Location"] == f"{BOARD}#feed-{feed.pk}"
    loads = DayLoad.objects.order_by("-trade_date")
    assert [(load.trade_date, load.trigger, load.requested_by, load.status) for load in loads] == [
        (MONDAY, LoadTrigger.RELOAD, alice, LoadStatus.QUEUED),
        (FRIDAY, LoadTrigger.RELOAD, alice, LoadStatus.QUEUED),
    ]
    action = MarketAction.objects.get()
    assert (action.kind, action.actor, action.via, action.message) == ("reload", alice, "admin", "restated")
    assert action.detail["queued"] == ["2026-11-02", "2026-10-30"]
    board = client.get(response["Location"]).content.decode()
    assert "Reload of cn-equities: queued 2 day(s): 2026-11-02, 2026-10-30." in board


@pytest.mark.parametrize(
    ("sent", "why"),
    [
        ({"day": ["2026-11-02"]}, "A reload needs a reason"),
        ({"day": [], "reason": "restated"}, "No day chosen."),
        ({"day": ["2026-10-31"], "reason": "restated"}, "Nothing to reload: no day chosen is a trading day."),
        ({"day": ["2026-10-20"], "reason": "restated"}, "A day ticked is outside 2026-10-27 … 2026-11-02"),
    ],
)
def test_a_refused_reload_says_why_and_writes_nothing(clock, alice, feed, sent, why):
    response = browser(alice).post(reload_url(feed), {"start": "2026-10-27", "end": "2026-11-02", **sent})

    assert response.status_code == 200 and why in response.content.decode()
    assert not DayLoad.objects.exists() and not MarketAction.objects.exists()


def test_a_range_beyond_the_bound_or_in_the_future_is_refused(clock, alice, feed, settings):
    client = browser(alice)
    future = page(client, f"{reload_url(feed)}?start=2026-11-02&end=2026-11-03")
    settings.INGEST_MARKET_BACKFILL_MAX_DAYS = 5
    long = page(client, f"{reload_url(feed)}?start=2026-10-27&end=2026-11-02")

    assert "2026-11-03 is in the future (the market&#x27;s today is 2026-11-02)." in future
    assert "The days span 7 days (2026-10-27 … 2026-11-02); at most 5 days per reload." in long
    assert 'id="reload-preview"' not in future + long


def test_the_reload_needs_the_operate_permission_and_the_feeds_tenant(clock, acme, feed):
    viewer = browser(staff("viewer", of=acme), "view_marketfeed")
    bob = browser(staff("bob", of=tenant("Globex")))
    sent = {"start": "2026-10-27", "end": "2026-11-02", "day": ["2026-11-02"], "reason": "restated"}

    assert viewer.get(reload_url(feed)).status_code == 403
    assert viewer.post(reload_url(feed), sent).status_code == 403
    assert bob.get(reload_url(feed)).status_code == 404
    assert bob.post(reload_url(feed), sent).status_code == 404
    assert not DayLoad.objects.exists()


def test_the_feed_page_and_the_board_link_the_reload(clock, alice, feed):
    client = browser(alice)
    assert f'href="{reload_url(feed)}"' in page(client, f"{FEEDS}{feed.pk}/change/")
    assert f'href="{reload_url(feed)}"' in page(client, BOARD)


# --- manage.py market_reload ---------------------------------------------------------------------


def reload_command(*args: str) -> str:
    out = StringIO()
    call_command("market_reload", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_prints_the_preview_and_writes_nothing(clock, feed):
    (covering,) = batch.queue_loads(feed, [FRIDAY], LoadTrigger.SCHEDULE)

    out = reload_command(
        "--tenant",
        "acme",
        "--feed",
        "cn-equities",
        "--start",
        "2026-10-30",
        "--end",
        "2026-11-02",
        "--dry-run",
    )

    assert out.splitlines() == [
        "Reload of cn-equities (acme), 2026-10-30 … 2026-11-02:",
        "  2026-11-02 Mon  open           5 bars  fetch",
        "  2026-11-01 Sun  closed         0 bars  skipped: not a trading day",
        "  2026-10-31 Sat  closed         0 bars  skipped: not a trading day",
        f"  2026-10-30 Fri  open           4 bars  covered by load {covering.pk} "
        f"(job {covering.job_id}, queued)",
        "1 day(s) to fetch, 1 API call(s).",
        "Dry run: nothing queued.",
    ]
    assert DayLoad.objects.count() == 1 and not MarketAction.objects.exists()


def test_the_command_reloads_the_days_and_records_the_action(clock, feed):
    out = reload_command(
        "--feed", "cn-equities", "--day", "2026-11-02", "--day", "2026-10-29", "--reason", "restated"
    )

    loads = list(DayLoad.objects.order_by("-trade_date"))
    assert [(load.trade_date, load.trigger, load.requested_by) for load in loads] == [
        (MONDAY, LoadTrigger.RELOAD, None),
        (date(2026, 10, 29), LoadTrigger.RELOAD, None),
    ]
    assert f"Queued 2 load(s): 2026-11-02 (load {loads[0].pk}, job {loads[0].job_id})" in out
    action = MarketAction.objects.get()
    assert (action.kind, action.actor, action.via, action.message) == ("reload", None, "command", "restated")


def test_the_command_records_the_user_it_acts_for_and_refuses_one_who_may_not(clock, feed, alice, globex):
    granted(alice, "market.operate_marketfeed")
    reload_command("--feed", "cn-equities", "--day", "2026-11-02", "--reason", "restated", "--user", "alice")
    assert MarketAction.objects.get().actor == alice
    assert DayLoad.objects.get().requested_by == alice

    stranger = granted(staff("bob", of=globex), "market.operate_marketfeed")
    for username, why in (
        ("carol", "no user named 'carol'"),
        (staff("dave", of=feed.tenant).username, "'dave' may not do this"),
        (stranger.username, "feed 'cn-equities'"),
    ):
        with pytest.raises(CommandError, match=re.escape(why)):
            reload_command(
                "--feed", "cn-equities", "--day", "2026-10-29", "--reason", "r", "--user", username
            )
    assert MarketAction.objects.count() == 1 and DayLoad.objects.count() == 1


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--feed", "nope", "--day", "2026-11-02", "--reason", "r"], "no market feed 'nope'"),
        (["--feed", "cn-equities", "--tenant", "nope", "--day", "2026-11-02"], "no tenant 'nope'"),
        (["--feed", "cn-equities", "--day", "2026-11-02"], "a reload needs a reason"),
        (["--feed", "cn-equities", "--reason", "r"], "give a range (--start and --end) or days (--day)"),
        (
            ["--feed", "cn-equities", "--start", "2026-10-30", "--end", "2026-11-02", "--day", "2026-11-02"],
            "not both",
        ),
        (
            ["--feed", "cn-equities", "--start", "2026-11-02", "--end", "2026-10-30", "--reason", "r"],
            "after it ends",
        ),
        (["--feed", "cn-equities", "--day", "2026-11-09", "--reason", "r"], "2026-11-09 is in the future"),
        (
            ["--feed", "cn-equities", "--day", "2026-10-20", "--reason", "r"],
            "the calendar does not know 2026-10-20",
        ),
        (
            ["--feed", "cn-equities", "--day", "2026-10-20", "--dry-run"],
            "the calendar does not know 2026-10-20",
        ),
        (
            ["--feed", "cn-equities", "--day", "yesterday", "--reason", "r"],
            "'yesterday' is not a date (YYYY-MM-DD)",
        ),
    ],
)
def test_the_command_names_the_problem_and_writes_nothing(clock, feed, args, why):
    with pytest.raises(CommandError, match=re.escape(why)):
        reload_command(*args)
    assert not DayLoad.objects.exists() and not MarketAction.objects.exists()


def test_a_feed_name_two_tenants_share_needs_the_tenant(clock, feed):
    MarketFeed.objects.create(
        tenant=tenant("Globex"), name="cn-equities", api_url="http://market.test/api", token="t"
    )
    with pytest.raises(
        CommandError, match="several tenants have a feed named 'cn-equities' \\(acme, globex\\)"
    ):
        reload_command("--feed", "cn-equities", "--day", "2026-11-02", "--reason", "r")
