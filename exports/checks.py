"""System checks for the exports app's configuration (``manage.py check --deploy``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Tags, Warning, register

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
