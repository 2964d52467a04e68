from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import formats, timezone
from django_q.models import Schedule, Task

import jobs
from jobs import registry, schedules
from jobs.models import Job

pytestmark = pytest.mark.django_db


# The schedules as django-q2's table holds them since before handlers declared them: the
# same names, so that an upgrade updates these rows rather than adding a second set.
SHIPPED = {
    "prune-finished-jobs": {"job": "jobs.prune", "cron": "17 * * * *"},
    "prune-entry-loads": {"job": "factors.prune_loads", "cron": "47 * * * *"},
    "ingest-reconcile-runs": {"job": "ingest.ReconcileRuns", "cron": "* * * * *"},
    "market-daily-batch": {"job": "market.Tick", "cron": "*/5 * * * *"},
    "exports-reconcile": {"job": "exports.Reconcile", "cron": "* * * * *"},
}


@pytest.fixture
def nightly():
    """A handler that declares its own schedule, for one test."""
    registry.register(
        registry.Handler(name="tests.nightly", func=lambda ctx: None, schedule=jobs.Cron("0 3 * * *"))
    )
    yield
    registry.unregister("tests.nightly")


def rows() -> dict[str, Schedule]:
    return {s.name: s for s in Schedule.objects.filter(name__startswith="conveyor:")}


def test_the_handlers_declare_the_schedules_under_the_names_django_q2_already_holds():
    assert schedules.declared() == SHIPPED


def test_migrate_keeps_django_q2_schedules_in_step_with_the_handlers(nightly):
    Schedule.objects.create(name="conveyor:retired", func="jobs.schedules.enqueue_scheduled")

    call_command("migrate", "jobs", verbosity=0)

    found = rows()
    assert set(found) == {f"conveyor:{name}" for name in [*SHIPPED, "tests.nightly"]}
    assert found["conveyor:tests.nightly"].cron == "0 3 * * *"  # named for its job type
    assert found["conveyor:tests.nightly"].args == "('tests.nightly', 'tests.nightly')"
    assert found["conveyor:market-daily-batch"].args == "('market.Tick', 'market-daily-batch')"


def test_an_override_retimes_a_schedule_in_its_own_row(settings):
    before = rows()["conveyor:market-daily-batch"].pk
    settings.JOBS_SCHEDULE_OVERRIDES = {"market-daily-batch": {"cron": "*/10 * * * *"}}

    call_command("migrate", "jobs", verbosity=0)

    row = rows()["conveyor:market-daily-batch"]
    assert (row.pk, row.cron, row.args) == (before, "*/10 * * * *", "('market.Tick', 'market-daily-batch')")


def test_an_override_of_none_turns_a_schedule_off(settings):
    settings.JOBS_SCHEDULE_OVERRIDES = {"exports-reconcile": None}

    call_command("migrate", "jobs", verbosity=0)

    assert set(rows()) == {f"conveyor:{name}" for name in SHIPPED if name != "exports-reconcile"}


def test_a_scheduled_run_enqueues_one_job_until_it_has_finished():
    first = schedules.enqueue_scheduled("tests.noop", "nightly")
    again = schedules.enqueue_scheduled("tests.noop", "nightly")
    assert first == again
    assert Job.objects.get(pk=first).payload == {"schedule": "nightly"}


@pytest.mark.parametrize("success", [True, False])
def test_the_schedule_list_shows_when_each_schedule_last_ran(admin_client, success):
    """django-q2's own list links a last run to its task lists, which this admin does not
    have: the list shows when the schedule's task ran instead."""
    schedule = Schedule.objects.get(name="conveyor:prune-finished-jobs")
    stopped = datetime(2026, 11, 27, 10, 17, 2, tzinfo=UTC)
    # What django-q2 records once the scheduler's task has run.
    task = Task.objects.create(
        id=uuid.uuid4().hex,
        name="hotel-xray-sixteen-lima",
        func="jobs.schedules.enqueue_scheduled",
        args=("jobs.prune", "prune-finished-jobs"),
        result=42 if success else "OperationalError: the database is down",
        started=stopped - timedelta(seconds=1),
        stopped=stopped,
        success=success,
    )
    Schedule.objects.filter(pk=schedule.pk).update(task=task.id)

    response = admin_client.get(reverse("admin:django_q_schedule_changelist"))

    assert response.status_code == 200
    row = next(line for line in response.content.decode().splitlines() if "prune-finished-jobs" in line)
    assert formats.localize(timezone.localtime(stopped)) in row


def test_the_public_api_is_importable_from_the_package():
    assert callable(jobs.enqueue) and callable(jobs.handler) and callable(jobs.publish)
    assert jobs.Fibonacci().delay(1).total_seconds() == 2
    with pytest.raises(AttributeError):
        jobs.does_not_exist  # noqa: B018
