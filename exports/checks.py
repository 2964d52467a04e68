"""System checks for the exports app's configuration (``manage.py check --deploy``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Tags, Warning, register

from exports import conf


@register(Tags.compatibility)
def check_worker_credential(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Export workers are remote workers: their token must be a ``JOBS_REMOTE_WORKERS``
    credential that serves the ``exports`` queue, or every claim they make is refused."""
    from django.conf import settings

    from exports.services import QUEUE

    token = conf.get("WORKER_TOKEN")
    if not token:
        return []
    credentials = getattr(settings, "JOBS_REMOTE_WORKERS", {})
    if isinstance(credentials, dict) and any(
        isinstance(entry, dict) and entry.get("token") == token and QUEUE in (entry.get("queues") or ())
        for entry in credentials.values()
    ):
        return []
    return [
        Warning(
            f"EXPORTS_WORKER_TOKEN is no JOBS_REMOTE_WORKERS credential serving the {QUEUE!r} queue",
            hint="Leave JOBS_REMOTE_WORKERS without an 'exports' entry (the settings add one for "
            "EXPORTS_WORKER_TOKEN), or give the workers that credential's token.",
            id="exports.W002",
        )
    ]
