"""The production settings as a deployment sets them, read by real processes: Django's
deployment checks, the HTTPS switch, and the cache that the throttles' counts live in."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests.support.processes import ROOT, database_url

pytestmark = pytest.mark.django_db

SHOW_SETTINGS = """
import json
from django.conf import settings
names = ["SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
         "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD",
         "SECURE_PROXY_SSL_HEADER", "CACHES"]
print(json.dumps({name: getattr(settings, name) for name in names}))
"""


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a deployment sets: no development shortcuts, a long random key, its host."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JOBS_", "CONVEYOR_", "THROTTLE_", "HSTS_", "HTTPS_"))
        and key
        not in {
            "DEBUG",
            "SECRET_KEY",
            "REDIS_URL",
            "ALLOWED_HOSTS",
            "PROXY_SETS_X_FORWARDED_PROTO",
            "DJANGO_SETTINGS_MODULE",
        }
    }
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=database_url(),
        CONVEYOR_VAR_DIR=str(tmp_path),
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS="conveyor.example.com",
    )
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    """What the shell's script printed last (the shell first says what it imported)."""
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


def settings_under(env: dict[str, str]) -> dict:
    result = manage(env, "shell", "-c", SHOW_SETTINGS)
    assert result.returncode == 0, result.stderr
    return json.loads(last_line(result))


def test_check_deploy_is_clean_with_the_https_switch_on(tmp_path):
    result = manage(
        production_env(tmp_path, HTTPS_ONLY="true"), "check", "--deploy", "--fail-level", "WARNING"
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_the_switch(tmp_path):
    result = manage(production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")

    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr


def test_the_switch_sets_redirect_secure_cookies_and_hsts(tmp_path):
    on = settings_under(production_env(tmp_path, HTTPS_ONLY="true"))
    off = settings_under(production_env(tmp_path))

    assert on["SECURE_SSL_REDIRECT"] and on["SESSION_COOKIE_SECURE"] and on["CSRF_COOKIE_SECURE"]
    assert on["SECURE_HSTS_SECONDS"] == 31_536_000
    assert on["SECURE_HSTS_INCLUDE_SUBDOMAINS"] and on["SECURE_HSTS_PRELOAD"]
    assert not (off["SECURE_SSL_REDIRECT"] or off["SESSION_COOKIE_SECURE"] or off["SECURE_HSTS_SECONDS"])


def test_the_proxy_header_is_trusted_only_when_the_deployment_says_its_proxy_sets_it(tmp_path):
    assert settings_under(production_env(tmp_path, HTTPS_ONLY="true"))["SECURE_PROXY_SSL_HEADER"] is None
    trusted = settings_under(production_env(tmp_path, HTTPS_ONLY="true", PROXY_SETS_X_FORWARDED_PROTO="true"))

    assert trusted["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_throttle_counts_are_in_redis_with_redis_url_and_in_var_without(tmp_path):
    with_redis = settings_under(production_env(tmp_path, REDIS_URL="redis://redis.internal:6379/0"))
    without = settings_under(production_env(tmp_path))

    assert with_redis["CACHES"]["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert with_redis["CACHES"]["default"]["LOCATION"] == "redis://redis.internal:6379/0"
    assert without["CACHES"]["default"]["BACKEND"].endswith("FileBasedCache")
    assert without["CACHES"]["default"]["LOCATION"] == str(tmp_path / "cache")


WRONG_TOKENS = """
from django.test import Client
client = Client(HTTP_HOST="conveyor.example.com", HTTP_AUTHORIZATION="Token " + "0" * 40)
print(" ".join(str(client.get("/api/jobs/").status_code) for _ in range(3)))
"""


def test_two_web_processes_of_one_machine_share_the_failed_token_count(tmp_path):
    # The count is per fixed window: a day's window (not a minute's) keeps both processes
    # in one window unless they straddle midnight UTC.
    env = production_env(tmp_path, THROTTLE_FAILED_AUTH_RATE="4/day")

    first, second = (manage(env, "shell", "-c", WRONG_TOKENS) for _ in range(2))

    assert last_line(first) == "401 401 401", first.stderr
    assert last_line(second) == "401 429 429", second.stderr


def test_https_redirects_plain_http_but_not_the_metrics_scrape(settings):
    settings.SECURE_SSL_REDIRECT = True

    assert Client().get("/admin/login/").status_code == 301
    assert Client().get("/metrics").status_code != 301
