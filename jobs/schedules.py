"""Periodic work: django-q2's scheduler enqueues Conveyor jobs on a cron.

A handler declares its schedule where it is registered::

    @jobs.handler("market.Tick", schedule=jobs.Cron("*/5 * * * *", name="market-daily-batch"))

and a deployment may only retime or disable one, by name, in ``JOBS_SCHEDULE_OVERRIDES``
(``{"market-daily-batch": {"cron": "*/10 * * * *"}, "exports-reconcile": None}``). The
scheduled django-q2 task only enqueues a job (with a unique key, so a slow run is never
doubled); the work itself runs as a Conveyor job with retries and history. django-q2's
rows, ``conveyor:<name>``, are kept in step with the schedules after every ``migrate``.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_migrate
from django.dispatch import receiver

from jobs import conf, registry

PREFIX = "conveyor:"


def declared() -> dict[str, dict[str, str]]:
    """Every schedule the handlers declare, by name: its job type and cron."""
    return {
        h.schedule_name: {"job": h.name, "cron": h.schedule.expression}
        for h in registry.scheduled()
        if h.schedule is not None
    }


def configured() -> dict[str, dict[str, str]]:
    """The schedules to run: the declared ones, as ``JOBS_SCHEDULE_OVERRIDES`` retimes them
    or leaves them out (an override naming no schedule is the system check jobs.E002)."""
    wanted = declared()
    for name, override in conf.schedule_overrides().items():
        if name not in wanted:
            continue
        if override is None:
            del wanted[name]
        else:
            wanted[name] = {**wanted[name], "cron": override["cron"]}
    return wanted


def enqueue_scheduled(job_type: str, schedule: str) -> int:
    """The django-q2 task behind every schedule: enqueue one job, unless one still runs."""
    from jobs import engine

    return engine.enqueue(job_type, {"schedule": schedule}, unique_key=f"schedule:{schedule}").pk


@receiver(post_migrate, dispatch_uid="conveyor-sync-schedules")
def sync_schedules(sender: Any, app_config: Any = None, using: str = "default", **kwargs: Any) -> None:
    if getattr(app_config, "name", None) != "jobs":
        return
    from django_q.models import Schedule

    wanted = configured()
    Schedule.objects.using(using).filter(name__startswith=PREFIX).exclude(
        name__in=[PREFIX + name for name in wanted]
    ).delete()
    for name, spec in wanted.items():
        Schedule.objects.using(using).update_or_create(
            name=PREFIX + name,
            defaults={
                "func": "jobs.schedules.enqueue_scheduled",
                "args": repr((spec["job"], name)),
                "schedule_type": Schedule.CRON,
                "cron": spec["cron"],
                "repeats": -1,
            },
        )
