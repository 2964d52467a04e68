"""System checks for the engine's configuration (``manage.py check``)."""

from __future__ import annotations

from typing import Any

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
    return errors + _schedule_errors()


def _schedule_errors() -> list[Error]:
    """Schedules two handlers declare under one name, and overrides that name no schedule
    or say neither "off" (None) nor a new cron."""
    from jobs import conf, schedules

    errors = []
    declaring: dict[str, list[str]] = {}
    for handler in registry.scheduled():
        declaring.setdefault(handler.schedule_name, []).append(handler.name)
    for name, types in sorted(declaring.items()):
        if len(types) > 1:
            errors.append(
                Error(
                    f"schedule {name!r} is declared by {' and '.join(types)}",
                    hint="Give each handler's jobs.Cron a name of its own.",
                    id="jobs.E003",
                )
            )
    declared = schedules.declared()
    for name, override in conf.schedule_overrides().items():
        if name not in declared:
            errors.append(
                Error(
                    f"JOBS_SCHEDULE_OVERRIDES names unknown schedule {name!r}",
                    hint=f"The handlers declare: {', '.join(sorted(declared)) or 'none'}.",
                    id="jobs.E002",
                )
            )
        elif override is not None and (not isinstance(override, dict) or set(override) != {"cron"}):
            errors.append(
                Error(
                    f"JOBS_SCHEDULE_OVERRIDES[{name!r}] is {override!r}",
                    hint='Give None to turn the schedule off, or {"cron": "<expression>"} to retime it.',
                    id="jobs.E004",
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


@register(Tags.security)
def check_remote_workers(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    from jobs import remote

    return [
        Error(problem, hint="See JOBS_REMOTE_WORKERS in docs/architecture.md.", id="jobs.E005")
        for problem in remote.credential_problems()
    ]
