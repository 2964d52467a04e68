"""Periodic work: django-q2's scheduler enqueues Conveyor jobs on a cron.

The scheduled django-q2 task only enqueues a job (with a unique key, so a slow run is
never doubled); the work itself runs as a Conveyor job with retries and history.
``JOBS_SCHEDULES`` maps a schedule name to ``{"job": type, "cron": "…"}``; the rows are
kept in step with it after every ``migrate``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.signals import post_migrate
from django.dispatch import receiver

DEFAULT_SCHEDULES: dict[str, dict[str, str]] = {
    "prune-finished-jobs": {"job": "jobs.prune", "cron": "17 * * * *"},
}
PREFIX = "conveyor:"


def configured() -> dict[str, dict[str, str]]:
    return {**DEFAULT_SCHEDULES, **getattr(settings, "JOBS_SCHEDULES", {})}


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
