"""The market data's admin: the feeds with their secret token, the freshness board with
each feed's calendar strip, the gap-fill's preview and confirmation, and the read-only
pages behind them, each scoped to the staff user's tenant.

The engine's clock stands at Monday 2026-11-02 17:00 in Shanghai: the market's today.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils.timezone import localtime

from market import batch
from market.admin import ACTIONS_SHOWN
from market.models import (
    BatchStatus,
    DailyBar,
    DailyBatch,
    Dataset,
    DayLoad,
    LoadStatus,
    LoadTrigger,
    MarketAction,
    MarketFeed,
    SourceFreshness,
    TradingDay,
)
from tests.support.base import page, staff
from tests.support.history import history_rows

pytestmark = pytest.mark.django_db

FEEDS = "/admin/market/marketfeed/"
BOARD = f"{FEEDS}board/"
ACTIONS = "/admin/market/marketaction/"
MONDAY = date(2026, 11, 2)
TOKEN = "tok-live-7f3a9c2e5b1d0a4c"
ROWS = {date(2026, 10, 28): 3, date(2026, 10, 29): 2, date(2026, 10, 30): 4}


def browser(user: User, *codenames: str) -> Client:
    """A logged-in browser for ``user``, granted the market permissions ``codenames`` (all
    of them when none is named)."""
    granted = Permission.objects.filter(content_type__app_label="market")
    user.user_permissions.set(granted.filter(codename__in=codenames) if codenames else granted)
    client = Client()
    client.force_login(user)
    return client


def gap_fill_url(feed: MarketFeed) -> str:
    return f"{FEEDS}{feed.pk}/gap-fill/"


def new_feed(tenant, name: str = "cn-equities", token: str = TOKEN) -> MarketFeed:
    return MarketFeed.objects.create(tenant=tenant, name=name, api_url="http://market.test/api", token=token)


def week(feed: MarketFeed) -> None:
    """The calendar of Tuesday 27 October to Monday 2 November (the weekend closed), with
    bars on Wednesday to Friday: the 27th and today have none."""
    TradingDay.objects.bulk_create(
        TradingDay(feed=feed, exchange=feed.exchange, cal_date=day, is_open=day.weekday() < 5)
        for day in (date(2026, 10, 27) + timedelta(days=n) for n in range(7))
    )
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code=f"{600000 + n}.SH", trade_date=day, open=10, high=11, low=9, close=10.5)
        for day, count in ROWS.items()
        for n in range(count)
    )


def sources(feed: MarketFeed, now) -> None:
    """The calendar loaded an hour ago (healthy), the instruments three days ago (stale),
    the daily bars failed after their last success (error)."""
    SourceFreshness.objects.bulk_create(
        [
            SourceFreshness(
                feed=feed,
                dataset=Dataset.CALENDAR,
                last_success=now - timedelta(hours=1),
                rows_today=8,
                rows_date=MONDAY,
            ),
            SourceFreshness(
                feed=feed,
                dataset=Dataset.INSTRUMENTS,
                last_success=now - timedelta(days=3),
                rows_today=60,
                rows_date=MONDAY - timedelta(days=3),
            ),
            SourceFreshness(
                feed=feed,
                dataset=Dataset.DAILY,
                last_success=now - timedelta(hours=2),
                last_failure=now - timedelta(hours=1),
                last_error="daily failed after 3 attempts: daily: HTTP 503 from the API",
            ),
        ]
    )


def cell(html: str, day: date) -> str:
    found = re.search(rf'<li class="market-day [^"]*" data-date="{day}"[^>]*>', html)
    assert found, f"no strip cell for {day}"
    return found.group(0)


@pytest.fixture
def alice(acme) -> User:
    return staff("alice", of=acme)


@pytest.fixture
def feed(acme) -> MarketFeed:
    return new_feed(acme)


# --- the board --------------------------------------------------------------------------------


def test_the_board_shows_each_source_with_a_coloured_status_and_its_last_error(clock, alice, feed, globex):
    sources(feed, clock.now())
    new_feed(globex, "globex-feed")

    html = page(browser(alice), BOARD)

    for dataset, status in [("trade_cal", "healthy"), ("stock_basic", "stale"), ("daily", "error")]:
        assert f'data-dataset="{dataset}" data-status="{status}"' in html
        assert f'<span class="market-status market-status-{status}">{status}</span>' in html
    assert "daily failed after 3 attempts: daily: HTTP 503 from the API" in html
    assert re.search(r'data-dataset="trade_cal".*?<td class="market-number">8</td>', html, re.S)
    assert re.search(r'data-dataset="stock_basic".*?<td class="market-number">0</td>', html, re.S)
    assert f'id="feed-{feed.pk}" data-feed="cn-equities" data-status="error"' in html
    assert "globex-feed" not in html  # another tenant's


def test_a_feed_never_loaded_shows_never_ingested_in_grey_words(clock, admin_client, feed):
    html = page(admin_client, BOARD)

    assert html.count('data-status="never_ingested"') == 1 + len(Dataset.values)
    assert '<span class="market-status market-status-never_ingested">never ingested</span>' in html
    assert "Acme" in html  # a platform operator is told whose feed it is


def test_the_strip_says_which_of_the_last_30_days_are_filled_missing_closed_or_unknown(clock, alice, feed):
    week(feed)
    DayLoad.objects.create(feed=feed, trade_date=MONDAY, trigger=LoadTrigger.SCHEDULE, created_at=clock.now())

    html = page(browser(alice), BOARD)

    strip = re.findall(r'<li class="market-day [^"]*" data-date="([\d-]+)"', html)
    assert strip == [(MONDAY - timedelta(days=29 - n)).isoformat() for n in range(30)]
    for day, rows in ROWS.items():
        assert f'data-state="filled" data-rows="{rows}"' in cell(html, day)
        assert f'title="{day:%Y-%m-%d %a}: filled, {rows} rows"' in cell(html, day)
    assert 'data-state="missing"' in cell(html, date(2026, 10, 27))
    assert 'class="market-day market-day-missing"' in cell(html, date(2026, 10, 27))
    for weekend in (date(2026, 10, 31), date(2026, 11, 1)):
        assert 'class="market-day market-day-non_trading"' in cell(html, weekend)
    assert 'class="market-day market-day-unknown"' in cell(html, date(2026, 10, 26))
    today = cell(html, MONDAY)
    assert "market-day-missing market-day-loading" in today and 'data-loading="1"' in today
    assert "2026-11-02 Mon: missing, loading" in today
    legend = html[html.index('id="market-legend"') : html.index("</ul>", html.index("market-legend"))]
    for label in ("filled", "missing", "non-trading", "unknown", "loading"):
        assert label in legend


def test_the_board_lists_the_recent_batches_and_loads_with_who_asked_and_the_job(clock, alice, feed):
    now = clock.now()
    DailyBatch.objects.create(
        feed=feed,
        market_date=date(2026, 10, 30),
        status=BatchStatus.FAILED,
        due_at=now,
        started_at=now,
        finished_at=now,
        gaps=["2026-10-27"],
        note="loads failed: 2026-10-27",
    )
    DailyBatch.objects.create(
        feed=feed, market_date=date(2026, 10, 29), status=BatchStatus.MISSED, due_at=now, finished_at=now
    )
    for n in range(12):  # only the newest ten are shown
        DayLoad.objects.create(
            feed=feed,
            trade_date=date(2026, 9, 1) + timedelta(days=n),
            trigger=LoadTrigger.OPERATOR,
            status=LoadStatus.SUCCEEDED,
            rows=5,
            requested_by=alice,
            job_id=900 + n,
            created_at=now - timedelta(minutes=30 - n),
            finished_at=now,
        )

    html = page(browser(alice), BOARD)

    assert re.search(
        r'data-date="2026-10-30" data-status="failed">.*?2026-10-27.*?'
        r"loads failed: 2026-10-27",
        html,
        re.S,
    )
    assert 'data-date="2026-10-29" data-status="missed"' in html
    assert '<span class="market-status market-status-missed">missed</span>' in html
    loads = html[html.index('class="market-loads"') :]
    assert "an operator&#x27;s gap-fill" in loads and "alice" in loads
    assert '<a href="/admin/jobs/job/911/change/">#911</a>' in loads
    assert "/admin/jobs/job/901/change/" not in loads  # the eleventh newest
    assert loads.index("2026-09-12") < loads.index("2026-09-03")  # newest first


def test_the_board_reads_each_thing_once_whatever_the_feeds_and_days(
    clock, alice, acme, django_assert_max_num_queries
):
    client = browser(alice)
    first = new_feed(acme, "first")
    week(first)
    sources(first, clock.now())
    page(client, BOARD)  # the session and the permissions are cached from here on
    with django_assert_max_num_queries(13) as one_feed:
        page(client, BOARD)
    for name in ("second", "third"):
        more = new_feed(acme, name)
        week(more)
        sources(more, clock.now())
        batch.queue_loads(more, [MONDAY], LoadTrigger.SCHEDULE)

    with django_assert_max_num_queries(len(one_feed)) as three_feeds:
        html = page(client, BOARD)

    assert html.count('class="module market-feed"') == 3
    assert len(three_feeds) == len(one_feed)


def test_the_changelist_links_the_board_and_shows_each_source_status(clock, alice, feed):
    sources(feed, clock.now())

    html = page(browser(alice), FEEDS)

    assert f'href="{BOARD}"' in html
    assert f'href="{BOARD}#feed-{feed.pk}"' in html
    assert "trade_cal: healthy" in html and "daily: error" in html


def test_the_board_needs_the_view_permission(acme, feed):
    nobody = browser(staff("nobody", of=acme), "view_dailybatch")

    assert nobody.get(BOARD).status_code == 403


# --- the token --------------------------------------------------------------------------------


def test_the_token_is_never_shown_only_its_last_four_characters_in_the_list(clock, alice, feed):
    client = browser(alice)

    pages = [page(client, url) for url in (FEEDS, f"{FEEDS}{feed.pk}/change/", BOARD, gap_fill_url(feed))]

    for html in pages:
        assert TOKEN not in html and TOKEN[:-4] not in html
    assert "••••0a4c" in pages[0]
    assert re.search(r'<input type="password" name="token"[^>]*>', pages[1])
    assert 'value="' not in re.search(r'<input type="password" name="token"[^>]*>', pages[1]).group(0)


def test_a_short_token_is_masked_whole(clock, alice, acme):
    new_feed(acme, "short", token="abc12345")

    html = page(browser(alice), FEEDS)

    assert "abc12345" not in html and "2345" not in html and "••••" in html


def feed_form(**fields: str) -> dict[str, str]:
    data = {
        "name": "cn-equities",
        "api_url": "http://market.test/api",
        "token": "",
        "exchange": "SSE",
        "enabled": "on",
    }
    data.update(fields)
    return data


def test_saving_a_feed_with_the_token_left_empty_keeps_it_and_a_new_one_replaces_it(clock, alice, feed):
    client = browser(alice)

    kept = client.post(f"{FEEDS}{feed.pk}/change/", feed_form(exchange="SZSE"))
    feed.refresh_from_db()
    assert kept.status_code == 302 and (feed.exchange, feed.token) == ("SZSE", TOKEN)

    client.post(f"{FEEDS}{feed.pk}/change/", feed_form(token="tok-rotated-123456789"))
    feed.refresh_from_db()
    assert feed.token == "tok-rotated-123456789"


def test_a_tenants_staff_adds_a_feed_to_their_tenant_and_a_new_feed_needs_a_token(clock, alice, acme, globex):
    client = browser(alice)
    form = page(client, f"{FEEDS}add/")
    assert 'name="tenant"' not in form

    refused = client.post(f"{FEEDS}add/", feed_form(name="new"))
    assert refused.status_code == 200 and "A new feed needs its token." in refused.content.decode()
    client.post(f"{FEEDS}add/", feed_form(name="new", token="tok-new-feed-0001", tenant=str(globex.pk)))

    added = MarketFeed.objects.get(name="new")
    assert (added.tenant, added.token) == (acme, "tok-new-feed-0001")
    taken = client.post(f"{FEEDS}add/", feed_form(name="new", token="tok-again-000001"))
    assert "this tenant already has a feed named" in taken.content.decode()


def test_a_platform_operator_chooses_the_tenant_and_never_deletes_a_feed(clock, admin_client, acme, feed):
    assert 'name="tenant"' in page(admin_client, f"{FEEDS}add/")
    change = page(admin_client, f"{FEEDS}{feed.pk}/change/")
    assert 'name="tenant"' not in change  # shown, not moved to another tenant
    assert admin_client.get(f"{FEEDS}{feed.pk}/delete/").status_code == 403


# --- tenants ----------------------------------------------------------------------------------


def test_another_tenants_staff_cannot_see_or_gap_fill_the_feed(clock, feed, globex):
    week(feed)
    bob = browser(staff("bob", of=globex))

    assert "cn-equities" not in page(bob, BOARD)
    assert "cn-equities" not in page(bob, FEEDS)
    assert bob.get(f"{gap_fill_url(feed)}?start=2026-10-27&end=2026-11-02").status_code == 404
    assert bob.post(gap_fill_url(feed), {"start": "2026-10-27", "end": "2026-11-02"}).status_code == 404
    assert not DayLoad.objects.exists() and not MarketAction.objects.exists()


def test_gap_fill_needs_the_change_permission(clock, acme, feed):
    week(feed)
    viewer = browser(staff("viewer", of=acme), "view_marketfeed")

    assert "Preview" not in page(viewer, BOARD)
    assert viewer.get(gap_fill_url(feed)).status_code == 403
    assert viewer.post(gap_fill_url(feed), {"start": "2026-10-27", "end": "2026-11-02"}).status_code == 403
    assert not DayLoad.objects.exists()


def test_the_confirmation_is_csrf_protected(clock, alice, feed):
    week(feed)
    client = Client(enforce_csrf_checks=True)
    browser(alice)
    client.force_login(alice)

    response = client.post(gap_fill_url(feed), {"start": "2026-10-27", "end": "2026-11-02"})

    assert response.status_code == 403 and not DayLoad.objects.exists()


# --- gap-fill -----------------------------------------------------------------------------------


def test_the_form_offers_the_last_seven_days_up_to_today(clock, alice, feed):
    html = page(browser(alice), gap_fill_url(feed))
    board = page(browser(alice), BOARD)

    for text in (html, board):
        assert re.search(r'name="start" value="2026-10-27"', text)
        assert re.search(r'name="end" value="2026-11-02"', text)
    assert 'id="gap-fill-preview"' not in html


def test_the_preview_shows_the_days_to_fetch_the_calls_and_the_days_a_load_covers(clock, alice, feed):
    week(feed)
    (covering,) = batch.queue_loads(feed, [date(2026, 10, 27)], LoadTrigger.SCHEDULE)

    html = page(browser(alice), f"{gap_fill_url(feed)}?start=2026-10-27&end=2026-11-02")

    preview = html[html.index('id="gap-fill-preview"') :]
    assert 'data-api-calls="1"' in preview
    days = re.findall(r'<li data-date="([\d-]+)">', preview[: preview.index("gap-fill-covered")])
    assert days == ["2026-11-02"]
    covered = preview[preview.index('id="gap-fill-covered"') :]
    assert '<li data-date="2026-10-27">' in covered
    assert f'href="/admin/market/dayload/{covering.pk}/change/"' in covered
    assert f'href="/admin/jobs/job/{covering.job_id}/change/"' in covered
    assert 'id="gap-fill-confirm"' in preview and "Confirm: queue 1 load" in preview
    assert DayLoad.objects.count() == 1 and not MarketAction.objects.exists()  # a dry run


def test_a_preview_beyond_the_calendar_counts_its_call_and_offers_no_confirmation(clock, alice, feed):
    week(feed)

    html = page(browser(alice), f"{gap_fill_url(feed)}?start=2026-10-20&end=2026-11-02")

    assert 'data-api-calls="3"' in html  # two days and the calendar
    assert "The calendar does not cover the whole range yet" in html
    assert 'id="gap-fill-confirm"' not in html


def test_confirming_queues_the_loads_for_the_user_and_records_the_action(clock, alice, feed):
    week(feed)
    (covering,) = batch.queue_loads(feed, [date(2026, 10, 27)], LoadTrigger.SCHEDULE)
    client = browser(alice)

    response = client.post(
        gap_fill_url(feed), {"start": "2026-10-27", "end": "2026-11-02", "reason": "the vendor's outage"}
    )

    assert response.status_code == 302
    assert response["Location"] == f"{BOARD}#feed-{feed.pk}"
    load = DayLoad.objects.exclude(pk=covering.pk).get()
    assert (load.trade_date, load.trigger, load.requested_by, load.status) == (
        MONDAY,
        LoadTrigger.OPERATOR,
        alice,
        LoadStatus.QUEUED,
    )
    assert load.job_id is not None
    action = MarketAction.objects.get()
    assert (action.feed, action.kind, action.actor, action.via) == (feed, "gap_fill", alice, "admin")
    assert action.detail["queued"] == ["2026-11-02"] and action.message == "the vendor's outage"
    board = client.get(response["Location"]).content.decode()
    assert (
        "Gap-fill of cn-equities: queued 1 day(s): 2026-11-02. Already being loaded: 2026-10-27."
    ) in board
    # The feed's page shows it in its history, the detail on one line.
    [shown] = history_rows(page(client, f"{FEEDS}{feed.pk}/change/"))
    assert (shown["what"], shown["by"], shown["via"], shown["change"]) == ("gap_fill", "alice", "admin", "—")
    assert (
        shown["detail"].startswith("covered: {")  # its column, as a row has a detail
        and 'queued: ["2026-11-02"], start: 2026-10-27' in shown["detail"]
    )
    assert 'data-loading="1"' in cell(board, MONDAY)
    assert 'data-loading="1"' in cell(board, date(2026, 10, 27))


@pytest.mark.parametrize(
    ("start", "end", "why"),
    [
        (
            "2026-10-27",
            "2026-11-03",
            "The range ends in the future (2026-11-03; the market&#x27;s today is 2026-11-02).",
        ),
        ("2026-11-02", "2026-10-27", "The range starts (2026-11-02) after it ends (2026-10-27)."),
        ("2025-10-01", "2026-11-02", "The range is 398 days; at most 366 days per gap-fill."),
        ("2026-10-20", "2026-11-02", "The calendar does not cover 2026-10-20 … 2026-11-02 yet"),
    ],
)
def test_a_refused_range_says_why_and_writes_nothing(clock, alice, feed, start, end, why):
    week(feed)
    client = browser(alice)

    confirmed = client.post(gap_fill_url(feed), {"start": start, "end": end})
    previewed = client.get(gap_fill_url(feed), {"start": start, "end": end})

    assert confirmed.status_code == 200
    confirmed_html = confirmed.content.decode()
    assert why in confirmed_html and 'class="error"' in confirmed_html
    assert f'value="{start}"' in confirmed_html  # the form as it was sent
    assert not DayLoad.objects.exists() and not MarketAction.objects.exists()
    if "calendar" not in why:  # the preview of a range beyond the calendar is allowed
        assert previewed.status_code == 200 and why in previewed.content.decode()
        assert 'id="gap-fill-preview"' not in previewed.content.decode()


def test_a_date_that_is_not_one_is_a_form_error(clock, alice, feed):
    response = browser(alice).post(gap_fill_url(feed), {"start": "yesterday", "end": "2026-11-02"})

    assert response.status_code == 200 and "Enter a valid date." in response.content.decode()
    assert not DayLoad.objects.exists()


def test_the_feed_page_shows_its_newest_actions_and_links_the_whole_list(clock, alice, feed):
    for n in range(ACTIONS_SHOWN + 3):
        MarketAction.objects.create(
            feed=feed, kind="gap_fill", actor=alice, via="api", at=clock.now() + timedelta(minutes=n)
        )
    client = browser(alice)

    html = page(client, f"{FEEDS}{feed.pk}/change/")

    rows = history_rows(html)
    newest = MarketAction.objects.filter(feed=feed).order_by("-at")[:ACTIONS_SHOWN]
    assert len(rows) == ACTIONS_SHOWN and rows[-1]["at"] == f"{localtime(newest[0].at):%Y-%m-%d %H:%M:%S}"
    assert [row["at"] for row in rows] == sorted(row["at"] for row in rows)  # oldest first
    assert "3 earlier entries not shown." in html
    assert f'href="{ACTIONS}?feed__id__exact={feed.pk}"' in html
    # Without the actions' own page, no link to it; the feed's page still shows them.
    html = page(browser(alice, "view_marketfeed", "change_marketfeed"), f"{FEEDS}{feed.pk}/change/")
    assert len(history_rows(html)) == ACTIONS_SHOWN and ACTIONS not in html
    # Saving the feed's form (posted without its history) keeps every action.
    assert client.post(f"{FEEDS}{feed.pk}/change/", feed_form()).status_code == 302
    assert MarketAction.objects.filter(feed=feed).count() == ACTIONS_SHOWN + 3


# --- the read-only pages ------------------------------------------------------------------------


def test_the_rows_behind_the_board_are_read_only_and_scoped_to_the_tenant(clock, alice, feed, globex):
    now = clock.now()
    other = new_feed(globex, "globex-feed")
    for each in (feed, other):
        sources(each, now)
        run = DailyBatch.objects.create(
            feed=each, market_date=MONDAY, status=BatchStatus.RUNNING, due_at=now, started_at=now
        )
        DayLoad.objects.create(
            feed=each,
            trade_date=MONDAY,
            trigger=LoadTrigger.SCHEDULE,
            batch=run,
            job_id=4242,
            requested_by=alice,
            created_at=now,
        )
        MarketAction.objects.create(
            feed=each,
            kind="gap_fill",
            actor=alice,
            via="admin",
            at=now,
            detail={"queued": [f"{each.name}-day"]},
        )
    client = browser(alice)
    mine = DayLoad.objects.get(feed=feed)

    for model in ("dailybatch", "dayload", "sourcefreshness", "marketaction"):
        url = f"/admin/market/{model}/"
        html = page(client, url)
        assert "globex-feed" not in html, model
        assert "cn-equities" in html, model
        assert f'href="{url}add/"' not in html, model
    listed = f"/admin/market/dayload/?status__exact=queued&trigger__exact=schedule&feed__id__exact={feed.pk}"
    loads = page(client, listed)
    # The job is named, and linked only for whom may view jobs.
    assert "#4242" in loads and "/admin/jobs/job/4242/change/" not in loads
    alice.user_permissions.add(Permission.objects.get(content_type__app_label="jobs", codename="view_job"))
    loads = page(client, listed)
    assert '<a href="/admin/jobs/job/4242/change/">#4242</a>' in loads
    assert '<td class="field-requested_by nowrap">alice</td>' in loads
    load_page = page(client, f"/admin/market/dayload/{mine.pk}/change/")
    assert 'name="_save"' not in load_page
    actions = page(client, "/admin/market/marketaction/")
    assert "cn-equities-day" in actions and "globex-feed-day" not in actions
    batch_page = page(client, f"/admin/market/dailybatch/{mine.batch_id}/change/")
    assert "/admin/jobs/job/4242/change/" in batch_page  # its loads
    other_load = DayLoad.objects.get(feed=other)
    assert client.get(f"/admin/market/dayload/{other_load.pk}/change/").status_code == 302


def test_the_market_apps_page_links_the_board(clock, alice, feed):
    assert f'href="{BOARD}"' in page(browser(alice), "/admin/market/")


def test_a_feed_at_a_private_address_is_refused_by_the_outbound_rules(clock, alice, settings):
    settings.INTAKE_HTTP_ALLOW = []
    refused = browser(alice).post(
        f"{FEEDS}add/", feed_form(name="inside", token="tok-inside-00001", api_url="http://10.1.2.3/")
    )
    assert refused.status_code == 200
    assert "is not allowed: its host is not a public internet address" in (refused.content.decode())
    assert not MarketFeed.objects.filter(name="inside").exists()


def test_moving_a_feed_to_another_host_needs_its_token_again(clock, alice, feed):
    client = browser(alice)
    moved = client.post(f"{FEEDS}{feed.pk}/change/", feed_form(api_url="http://elsewhere.test/"))
    assert "The API&#x27;s host changed: type the token again." in moved.content.decode()
    feed.refresh_from_db()
    assert feed.api_url != "http://elsewhere.test/"
    same_host = client.post(f"{FEEDS}{feed.pk}/change/", feed_form(api_url=feed.api_url.rstrip("/") + "/v2"))
    assert same_host.status_code == 302
