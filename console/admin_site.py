"""The admin is Conveyor's console: its own name, and only Conveyor's view of the work.

Every JSON field of every admin form refuses strings PostgreSQL cannot store (a lone
surrogate, a NUL) with a form error naming where they are, as the API does
(``console.admin.jsonfields``), rather than a 500 at the save.

django-q2 registers its task tables in the admin (successful and failed tasks, the ORM
broker's queue). In Conveyor they hold only the scheduler's small tasks, which enqueue
jobs; a "Failed tasks" list beside the failed jobs would be a second place that means
something else. The schedules stay: they say when the periodic jobs are enqueued, and when
each last ran (django-q2's own column would link to the task lists, which are gone).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django_q import admin as django_q_admin
from django_q.models import Failure, OrmQ, Schedule, Success, Task

from console.admin.jsonfields import use_everywhere


class ScheduleAdmin(django_q_admin.ScheduleAdmin):
    """django-q2's schedules, whose last run says when the schedule's task ran, not a link
    to a task list this admin does not have. The list leaves out the repeats and the
    cluster, the same for every schedule ``jobs.schedules`` keeps (for ever, on any
    cluster; a schedule's page shows both), so that whether its last run succeeded fits
    a 1,440 px screen beside the filters."""

    list_display = ("id", "name", "func", "schedule_type", "next_run", "get_last_run", "get_success")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        last_run = Task.objects.filter(id=OuterRef("task")).values("stopped")
        return super().get_queryset(request).annotate(task_stopped=Subquery(last_run))

    @admin.display(description="last run", ordering="task_stopped")
    def get_last_run(self, obj: Any) -> datetime | None:
        return obj.task_stopped


def configure() -> None:
    """Run once the admin has discovered every app's registrations (console/apps.py)."""
    admin.site.site_header = "Conveyor"
    admin.site.site_title = "Conveyor"
    admin.site.index_title = "Operations"
    # The site root only leads back to the admin: no "View site" link.
    admin.site.site_url = None
    # The lists are wide (a job's error, its pipeline, its tenant, beside the filters): the
    # navigation sidebar would take a fifth of a 1,440 px screen from them; the front page
    # and the breadcrumbs lead everywhere it does.
    admin.site.enable_nav_sidebar = False
    for model in (Success, Failure, OrmQ):
        if admin.site.is_registered(model):
            admin.site.unregister(model)
    if admin.site.is_registered(Schedule):
        admin.site.unregister(Schedule)
    admin.site.register(Schedule, ScheduleAdmin)
    use_everywhere(admin.site)
