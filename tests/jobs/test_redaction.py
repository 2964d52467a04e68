"""Secrets taken out of text that code outside Conveyor wrote (a hook's log)."""

from __future__ import annotations

from jobs.redaction import REDACTED, redact_secrets


def test_the_secret_key_and_its_fallbacks_are_taken_out(settings):
    settings.SECRET_KEY = "s3cr3t-key-value-for-this-test-only"
    settings.SECRET_KEY_FALLBACKS = ["an-older-key-still-accepted"]
    text = f"env: SECRET_KEY={settings.SECRET_KEY} old=an-older-key-still-accepted"
    assert redact_secrets(text) == f"env: SECRET_KEY={REDACTED} old={REDACTED}"


def test_settings_named_for_tokens_and_passwords_are_taken_out_and_others_kept(settings):
    settings.EXPORTS_WORKER_TOKEN = "worker-token-0123456789"
    settings.EXPORTS_TRINO_PASSWORD = "trino-pass-987"
    settings.CACHES = {"default": {"BACKEND": "x", "KEY_PREFIX": "conveyor-prefix"}}
    text = "worker-token-0123456789 trino-pass-987 conveyor-prefix"
    assert redact_secrets(text) == f"{REDACTED} {REDACTED} conveyor-prefix"


def test_a_database_password_and_a_url_password_in_settings_are_taken_out(settings, monkeypatch):
    monkeypatch.setitem(settings.DATABASES["default"], "PASSWORD", "db-pw-42")
    settings.REDIS_URL = "redis://:redis-pw-77@redis.internal:6379/0"
    assert redact_secrets("db-pw-42 and redis-pw-77 leaked") == f"{REDACTED} and {REDACTED} leaked"


def test_environment_variables_named_for_secrets_are_taken_out_from_a_minimum_length(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-abcdef123")
    monkeypatch.setenv("SOME_API_TOKEN", "token-xyz-123456")
    monkeypatch.setenv("SHORT_TOKEN", "true")
    monkeypatch.setenv("DATABASE_URL", "postgresql://conveyor:pg-password-1@db.internal/conveyor")
    text = "aws-secret-abcdef123 token-xyz-123456 true pg-password-1"
    assert redact_secrets(text) == f"{REDACTED} {REDACTED} true {REDACTED}"


def test_credentials_of_any_url_are_taken_out():
    text = "fetching https://alice:hunter2@example.com/data and s3://bucket/key"
    assert redact_secrets(text) == (f"fetching https://alice:{REDACTED}@example.com/data and s3://bucket/key")
