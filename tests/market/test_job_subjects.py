"""A market job's page says what it works for: the day load, with the load's own error
and a one-click load of the day again (retrying the job would not reopen the load)."""

from __future__ import annotations

import html as html_lib
from datetime import date

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from jobs.models import Job
from market import batch
from market.models import DayLoad, LoadStatus, LoadTrigger, MarketFeed, TradingDay
from tests.support.base import page, staff
from tests.support.drive import drain

pytestmark = pytest.mark.django_db

DAY = date(2026, 10, 30)


def failed_load(tenant, settings, clock) -> tuple[DayLoad, Job]:
    feed = MarketFeed.objects.create(
        tenant=tenant, name="cn-equities", api_url="http://market.invalid/api", token="t"
    )
    (load,) = batch.queue_loads(feed, [DAY], LoadTrigger.OPERATOR)
    drain(clock)
    load.refresh_from_db()
    assert load.status == LoadStatus.FAILED
    return load, Job.objects.get(pk=load.job_id)


def test_a_failed_load_days_job_links_its_load_says_its_error_and_offers_the_days_load(
    admin_client, acme, clock, settings
):
    load, job = failed_load(acme, settings, clock)

    text = html_lib.unescape(page(admin_client, f"/admin/jobs/job/{job.pk}/change/"))

    assert (
        f'<a href="/admin/market/dayload/{load.pk}/change/">Day load 2026-10-30 of feed cn-equities</a>'
        in text
    )
    assert f'<a href="/admin/market/marketfeed/{load.feed_id}/change/">feed</a>' in text
    assert load.error.splitlines()[0] in text
    assert f'action="/admin/market/marketfeed/{load.feed_id}/gap-fill/"' in text
    assert "Load 2026-10-30 again" in text
    assert "it works for Day load 2026-10-30 of feed cn-equities: use “Load 2026-10-30 again”" in text


def test_the_day_load_again_from_the_job_page_queues_a_new_load(admin_client, acme, clock, settings):
    load, _ = failed_load(acme, settings, clock)
    TradingDay.objects.create(feed=load.feed, exchange=load.feed.exchange, cal_date=DAY, is_open=True)

    admin_client.post(f"/admin/market/marketfeed/{load.feed_id}/gap-fill/", {"start": DAY, "end": DAY})

    assert DayLoad.objects.filter(feed=load.feed, trade_date=DAY, status=LoadStatus.QUEUED).exists()


def test_another_tenants_staff_and_staff_without_the_permission_get_no_link(acme, globex, clock, settings):
    load, job = failed_load(acme, settings, clock)
    for name, tenant, apps in (("bob", globex, ["jobs", "market"]), ("carol", acme, ["jobs"])):
        user = staff(name, of=tenant)
        user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=apps))
        client = Client()
        client.force_login(user)
        Job.objects.filter(pk=job.pk).update(tenant=tenant)

        text = page(client, f"/admin/jobs/job/{job.pk}/change/")

        assert "Works for" not in text and f"/admin/market/dayload/{load.pk}/" not in text
