"""System checks for the exports app's configuration (``manage.py check --deploy``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register

from exports import conf

MIN_WORKER_TOKEN_CHARS = 32


@register(Tags.security, deploy=True)
def check_worker_token(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """The worker token's strength is all that stands against guessing it: a right token
    is accepted whatever its address's count of wrong ones (console.throttling.wrong_token)."""
    token = conf.get("WORKER_TOKEN")
    if token and len(token) < MIN_WORKER_TOKEN_CHARS:
        return [
            Warning(
                f"EXPORTS_WORKER_TOKEN is shorter than {MIN_WORKER_TOKEN_CHARS} characters",
                hint="Make it random: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
                id="exports.W001",
            )
        ]
    return []


@register(Tags.compatibility)
def check_claim_timeout(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """A worker renews its claim every third of the timeout: a shorter timeout would take
    live exports back (and run them twice) on the first slow answer."""
    from exports.services import MIN_CLAIM_TIMEOUT_SECONDS

    timeout = conf.get("CLAIM_TIMEOUT_SECONDS")
    if timeout < MIN_CLAIM_TIMEOUT_SECONDS:
        return [
            Error(
                f"EXPORTS_CLAIM_TIMEOUT_SECONDS is {timeout}: at least {MIN_CLAIM_TIMEOUT_SECONDS}",
                hint="Export workers renew a claim every third of it (at most every 5 s); "
                "two renewals must be able to fail before a live export's claim is taken back.",
                id="exports.E001",
            )
        ]
    return []
