"""The admin is Conveyor's console: its own name, and only Conveyor's view of the work.

Every JSON field of every admin form refuses strings PostgreSQL cannot store (a lone
surrogate, a NUL) with a form error naming where they are, as the API does
(``jobs.contrib.admin.jsonfields``), rather than a 500 at the save.

django-q2 registers its task tables in the admin (successful and failed tasks, the ORM
broker's queue). In Conveyor they hold only the scheduler's small tasks, which enqueue
jobs; a "Failed tasks" list beside the failed jobs would be a second place that means
something else. The schedules stay: they say when the periodic jobs are enqueued.
"""

from __future__ import annotations

from django.contrib import admin
from django_q.models import Failure, OrmQ, Success

from jobs.contrib.admin.jsonfields import use_everywhere


def configure() -> None:
    """Run once the admin has discovered every app's registrations (project/apps.py)."""
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
    use_everywhere(admin.site)
