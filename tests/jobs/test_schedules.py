from __future__ import annotations

import pytest
from django.core.management import call_command
from django_q.models import Schedule

import jobs
from jobs import schedules
from jobs.models import Job

pytestmark = pytest.mark.django_db


def test_migrate_keeps_django_q2_schedules_in_step_with_the_settings(settings):
    settings.JOBS_SCHEDULES = {"nightly-noop": {"job": "tests.noop", "cron": "0 3 * * *"}}
    Schedule.objects.create(name="conveyor:retired", func="jobs.schedules.enqueue_scheduled")

    call_command("migrate", "jobs", verbosity=0)

    rows = {s.name: s for s in Schedule.objects.filter(name__startswith="conveyor:")}
    assert set(rows) == {"conveyor:prune-finished-jobs", "conveyor:nightly-noop"}
    assert rows["conveyor:nightly-noop"].cron == "0 3 * * *"
    assert rows["conveyor:nightly-noop"].args == "('tests.noop', 'nightly-noop')"


def test_a_scheduled_run_enqueues_one_job_until_it_has_finished():
    first = schedules.enqueue_scheduled("tests.noop", "nightly")
    again = schedules.enqueue_scheduled("tests.noop", "nightly")
    assert first == again
    assert Job.objects.get(pk=first).payload == {"schedule": "nightly"}


def test_the_public_api_is_importable_from_the_package():
    assert callable(jobs.enqueue) and callable(jobs.handler) and callable(jobs.publish)
    assert jobs.Fibonacci().delay(1).total_seconds() == 2
    with pytest.raises(AttributeError):
        jobs.does_not_exist  # noqa: B018
