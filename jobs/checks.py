"""System checks for the engine's configuration (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from jobs import registry


@register(Tags.compatibility)
def check_handlers(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    errors = [
        Error(
            f"job type {name!r} is registered twice (again by {where})",
            hint="Give each handler a unique dotted name.",
            id="jobs.E001",
        )
        for name, where in registry.duplicates()
    ]
    for event_name, handler_name in _unknown_schedule_targets():
        errors.append(
            Error(
                f"schedule {event_name!r} names unknown job type {handler_name!r}",
                hint="Register the handler or fix JOBS_SCHEDULES.",
                id="jobs.E002",
            )
        )
    return errors


@register(Tags.compatibility)
def check_lease(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    from jobs import conf

    if conf.heartbeat_seconds() * 4 > conf.lease_seconds():
        return [
            Warning(
                "JOBS_HEARTBEAT_SECONDS should be at most a quarter of JOBS_LEASE_SECONDS",
                hint="A worker stops starting jobs once half a lease passes without a "
                "renewal (jobs.leases); a beat every quarter leaves room for a late one.",
                id="jobs.W001",
            )
        ]
    return []


def _unknown_schedule_targets() -> list[tuple[str, str]]:
    schedules = getattr(settings, "JOBS_SCHEDULES", {})
    return [(name, spec["job"]) for name, spec in schedules.items() if registry.get(spec["job"]) is None]
