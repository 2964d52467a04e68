"""The admin login's lockout (django-axes), through the real login form."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from jobs.testing import T0

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/?next=/admin/"


@pytest.fixture
def root() -> User:
    return User.objects.create_superuser("root", password="right-password")


def log_in(client: Client, password: str, username: str = "root"):
    return client.post(LOGIN, {"username": username, "password": password})


def logged_in(client: Client) -> bool:
    return client.get("/admin/").status_code == 200


def fail(client: Client, times: int, username: str = "root") -> list[int]:
    return [log_in(client, "wrong", username).status_code for _ in range(times)]


def test_after_five_failures_the_right_password_is_refused_and_the_page_says_why(root, address):
    client = Client(REMOTE_ADDR=address)

    assert fail(client, 4) == [200] * 4  # the form again, with its error
    assert fail(client, 1) == [429]
    refused = log_in(client, "right-password")

    assert refused.status_code == 429
    page = refused.content.decode()
    assert 'id="login-locked"' in page and "even with the right password" in page
    assert "“root”" in page and "15\xa0minutes" in page
    assert refused["Retry-After"] == "900"
    assert not logged_in(client)


def test_the_lockout_is_for_the_username_from_that_address_only(root, address):
    fail(Client(REMOTE_ADDR=address), 5)
    elsewhere = Client(REMOTE_ADDR="192.0.2.44")

    assert log_in(elsewhere, "right-password").status_code == 302
    assert logged_in(elsewhere)


def test_another_username_from_that_address_may_still_log_in(root, address):
    User.objects.create_superuser("olga", password="olgas-password")
    client = Client(REMOTE_ADDR=address)
    fail(client, 5)

    assert log_in(client, "olgas-password", "olga").status_code == 302


def test_after_the_cool_off_the_right_password_works_again(root, address):
    client = Client(REMOTE_ADDR=address)
    with time_machine.travel(T0, tick=False) as clock:
        fail(client, 5)
        clock.shift(timedelta(minutes=14))
        assert log_in(client, "right-password").status_code == 429
        # That attempt started the cool-off again.
        clock.shift(timedelta(minutes=14))
        assert log_in(client, "right-password").status_code == 429

        clock.shift(timedelta(minutes=16))
        assert log_in(client, "right-password").status_code == 302


def test_a_successful_login_clears_the_count(root, address):
    client = Client(REMOTE_ADDR=address)
    fail(client, 4)
    assert log_in(client, "right-password").status_code == 302
    client.logout()

    assert fail(client, 4) == [200] * 4
    assert log_in(client, "right-password").status_code == 302


def test_the_limit_and_the_cool_off_are_settings(root, address, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.AXES_COOLOFF_TIME = timedelta(minutes=3)
    client = Client(REMOTE_ADDR=address)

    assert fail(client, 2) == [200, 429]
    refused = log_in(client, "right-password")
    assert refused["Retry-After"] == "180" and "3\xa0minutes" in refused.content.decode()


def test_a_forged_x_forwarded_for_does_not_escape_the_lockout(root, address):
    for n in range(5):
        log_in(Client(REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}"), "wrong")

    fresh_claim = Client(REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR="198.51.100.200")
    assert log_in(fresh_claim, "right-password").status_code == 429
