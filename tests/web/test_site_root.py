"""The site root and unknown addresses: a person lands in the admin, an API client gets
the API's addresses, and no page ever lists the URL patterns."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_a_browser_at_the_root_is_sent_to_the_admin(client):
    response = client.get("/", HTTP_ACCEPT="text/html,application/xhtml+xml,*/*;q=0.8")
    assert response.status_code == 302 and response["Location"] == reverse("admin:index")


def test_an_api_client_at_the_root_gets_the_apis_addresses(client):
    response = client.get("/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert response.json() == {"admin": "/admin/", "api_docs": "/api/docs/", "api_schema": "/api/schema/"}


@pytest.mark.parametrize("debug", [True, False])
def test_an_unknown_address_is_a_plain_404_even_with_debug(client, settings, debug):
    settings.DEBUG = debug
    response = client.get("/no-such-page", HTTP_ACCEPT="text/html")
    body = response.content.decode()
    assert response.status_code == 404
    assert "URLconf" not in body and "admin/" not in body and "api/schema" not in body
    assert client.post("/no-such-page/").status_code == 404


def test_an_address_missing_its_slash_is_redirected_as_before(client):
    response = client.get("/admin?x=1")
    assert response.status_code == 301 and response["Location"] == "/admin/?x=1"
    assert client.post("/admin").status_code == 404  # a POST body cannot follow a redirect


def test_the_admin_is_conveyors_console(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert "<title>Operations | Conveyor</title>" in page
    assert "Django administration" not in page and "View site" not in page
    # django-q2's task tables are not a second list of failures; its schedules stay.
    assert "Failed tasks" not in page and "Successful tasks" not in page
    assert reverse("admin:django_q_schedule_changelist") in page


def test_the_admins_front_page_links_the_console(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert 'id="console-links"' in page
    changelist = reverse("admin:jobs_job_changelist")
    for link in (
        reverse("admin:jobs_job_dashboard"),
        f"{changelist}?failed_within=1h",
        f"{changelist}?rescued=yes",
    ):
        assert f'href="{link}"' in page
