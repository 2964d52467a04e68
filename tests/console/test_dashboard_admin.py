"""The dashboard page in the admin: who may see it, what it shows (the API's figures, the
charts, the oldest due and stuck jobs) and that a tenant's staff see only their tenant."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.urls import reverse
from rest_framework.test import APIClient

from jobs import engine
from jobs.models import Job
from tests.support.base import make_job, staff, tenant

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:jobs_job_dashboard"
SVG = "{http://www.w3.org/2000/svg}svg"


def viewer(username: str, **options) -> User:
    user = staff(username, **options)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="jobs", codename="view_job"))
    return user


def finished(clock, seconds: float, **options) -> Job:
    job = make_job("tests.noop", **options)
    batch = engine.claim("w1", limit=1, types=["tests.noop"])
    clock.advance(seconds)
    engine.complete(batch.jobs[0], batch.token)
    return job


def stuck(clock, **options) -> Job:
    job = make_job("tests.crash", **options)
    engine.claim("w1", limit=1, types=["tests.crash"])
    return job


@pytest.fixture
def two_tenants(clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    for seconds in (10, 20, 30):
        finished(clock, seconds, tenant=acme)
    finished(clock, 99, tenant=globex)
    jobs = {
        "acme_stuck": stuck(clock, tenant=acme),
        "globex_stuck": stuck(clock, tenant=globex),
        "acme_due": make_job("tests.keyed", tenant=acme),
        "globex_due": make_job("tests.keyed", tenant=globex),
    }
    clock.advance(20)  # past the stuck jobs' 6 s leases; the keyed jobs wait 20 s
    return {"acme": acme, "globex": globex, **jobs}


def test_anonymous_users_are_sent_to_the_login_page(client):
    response = client.get(reverse(DASHBOARD))
    assert response.status_code == 302
    assert response.url.startswith(reverse("admin:login"))


def test_users_who_are_not_staff_are_refused(client, two_tenants):
    client.force_login(viewer("nina", of=two_tenants["acme"], is_staff=False))
    response = client.get(reverse(DASHBOARD))
    assert response.status_code == 302
    assert response.url.startswith(reverse("admin:login"))


def test_staff_without_the_view_permission_on_jobs_are_refused(client):
    client.force_login(staff("sam", operator=True))
    assert client.get(reverse(DASHBOARD)).status_code == 403


def test_a_tenants_staff_see_only_their_tenants_jobs(client, two_tenants):
    client.force_login(viewer("alice", of=two_tenants["acme"]))

    response = client.get(reverse(DASHBOARD))

    assert response.status_code == 200
    board = response.context["board"]
    assert [row.job.pk for row in board.oldest_due] == [two_tenants["acme_due"].pk]
    assert [row.job.pk for row in board.stuck] == [two_tenants["acme_stuck"].pk]
    noop = next(row for row in board.figures.types if row.type == "tests.noop")
    assert (noop.finished, noop.p50_seconds) == (3, pytest.approx(20.0))
    html = response.content.decode()
    for name in ("acme_due", "acme_stuck"):
        assert reverse("admin:jobs_job_change", args=[two_tenants[name].pk]) in html
    for name in ("globex_due", "globex_stuck"):
        assert f'data-job="{two_tenants[name].pk}"' not in html


def test_a_platform_operator_sees_every_tenant(client, two_tenants):
    client.force_login(viewer("olga", operator=True))

    board = client.get(reverse(DASHBOARD)).context["board"]

    assert len(board.oldest_due) == 2 and len(board.stuck) == 2
    assert next(row for row in board.figures.types if row.type == "tests.noop").finished == 4


def test_the_page_shows_the_same_figures_as_the_api(client, two_tenants):
    user = viewer("alice", of=two_tenants["acme"])
    client.force_login(user)
    api = APIClient()
    api.force_login(user)

    for window in ("1h", "24h", "7d"):
        page = client.get(reverse(DASHBOARD), {"window": window}).context["board"].figures
        body = api.get("/api/jobs/dashboard/", {"window": window}).json()
        assert [
            (row.type, row.finished, row.p50_seconds, row.p95_seconds, row.retries, row.rescues)
            for row in page.types
        ] == [
            (
                row["type"],
                row["finished"],
                row["p50_seconds"],
                row["p95_seconds"],
                row["retries"],
                row["rescues"],
            )
            for row in body["types"]
        ]
        assert page.expired_leases == body["expired_leases"]


def test_the_lists_link_each_job_and_show_its_age(client, two_tenants):
    client.force_login(viewer("olga", operator=True))

    html = client.get(reverse(DASHBOARD)).content.decode()

    due = two_tenants["acme_due"]
    assert f'<tr class="due-job" data-job="{due.pk}">' in html
    assert f'<a href="{reverse("admin:jobs_job_change", args=[due.pk])}">#{due.pk}</a>' in html
    assert "20.0 s" in html  # how long the keyed jobs have been due
    assert 'id="dashboard-stuck"' in html and "Stuck past their lease (2)" in html


def test_the_charts_are_inline_accessible_svg(client, two_tenants):
    client.force_login(viewer("olga", operator=True))

    response = client.get(reverse(DASHBOARD))

    html = response.content.decode()
    assert 'id="dashboard"' in html
    assert '<meta http-equiv="refresh" content="30">' in html
    panels = response.context["panels"]
    assert [panel.type for panel in panels] == ["tests.noop"]  # the stuck jobs have no event yet
    for panel in panels:
        assert len(panel.charts) == 3
        for markup in panel.charts:
            svg = ET.fromstring(str(markup))
            assert svg.tag == SVG and svg.get("role") == "img"
            assert svg.get("id") in html
    assert html.count('<figure class="chart">') == 3
    noop = ET.fromstring(str(panels[0].charts[0]))
    bars = noop.findall(".//{http://www.w3.org/2000/svg}rect[@class='bar']")
    assert sum(float(bar.get("data-value")) for bar in bars[:12]) == 4  # finished, all buckets


@pytest.mark.parametrize(("window", "buckets"), [("15m", 15), ("1h", 12), ("24h", 24), ("7d", 28)])
def test_the_window_is_chosen_in_the_query_string(client, clock, window, buckets):
    client.force_login(viewer("olga", operator=True))

    response = client.get(reverse(DASHBOARD), {"window": window})

    assert response.context["window"] == window
    board = response.context["board"]
    assert board.buckets.count == buckets
    assert board.figures.until - board.figures.since == timedelta(
        **{"15m": {"minutes": 15}, "1h": {"hours": 1}, "24h": {"days": 1}, "7d": {"days": 7}}[window]
    )
    assert f'data-window="{window}" aria-current="page"' in response.content.decode()


def test_an_unknown_window_falls_back_to_the_hour_and_says_so(client, clock):
    client.force_login(viewer("olga", operator=True))

    response = client.get(reverse(DASHBOARD), {"window": "2h"})

    assert response.context["window"] == "1h"
    assert [str(message) for message in get_messages(response.wsgi_request)] == [
        "Unknown window '2h': showing the last hour."
    ]


def test_an_empty_dashboard_renders(client, clock):
    client.force_login(viewer("olga", operator=True))

    html = client.get(reverse(DASHBOARD)).content.decode()

    assert "No job finished, retried or was rescued in this window." in html
    assert "No job is waiting" in html


def test_the_job_list_and_the_jobs_app_page_link_to_the_dashboard(admin_client):
    url = reverse(DASHBOARD)
    changelist = admin_client.get(reverse("admin:jobs_job_changelist")).content.decode()
    app_index = admin_client.get(reverse("admin:app_list", args=["jobs"])).content.decode()
    assert f'href="{url}"' in changelist
    assert f'href="{url}"' in app_index
