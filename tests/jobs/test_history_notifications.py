"""A history row sends no notification: the live streams follow the table by id, and a
NOTIFY on each commit would make the engine's commits wait for one another. Migration
0020 dropped the trigger of 0004; migrating back brings it back as it was."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from jobs.models import JobEvent
from jobs.notify import raw_connection
from tests.support.base import make_job

pytestmark = pytest.mark.django_db(transaction=True)

CHANNEL = "conveyor_job_events"  # the channel the dropped trigger sent on


@pytest.fixture
def listener() -> Iterator[psycopg.Connection]:
    conn = raw_connection(application_name="test history listener")
    conn.execute(f'LISTEN "{CHANNEL}"')
    try:
        yield conn
    finally:
        conn.close()


def notified_then_marker(listener: psycopg.Connection) -> list[str]:
    """What ``listener`` heard up to a marker sent now. Notifications arrive in commit
    order, so anything the commits before it sent comes first: no waiting for silence."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, 'marker')", [CHANNEL])
    heard: list[str] = []
    for notify in listener.notifies(timeout=10):
        heard.append(notify.payload)
        if notify.payload == "marker":
            return heard
    raise AssertionError(f"the marker never came; heard {heard}")


def insert_event() -> int:
    job = make_job("tests.noop")
    return JobEvent.objects.create(job=job, at=timezone.now(), kind="released").pk


def trigger_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'jobs_jobevent_notify'),"
            " EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'jobs_jobevent_notify')"
        )
        trigger, function = cursor.fetchone()
    assert trigger == function
    return trigger


def migrate_jobs(target: str) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("jobs", target)])


@pytest.fixture
def forward_at_the_end() -> Iterator[None]:
    """Whatever the test does, the next one finds every app migrated to the end."""
    yield
    call_command("migrate", verbosity=0)


def test_a_committed_history_row_sends_no_notification(listener):
    insert_event()
    assert not trigger_exists()
    assert notified_then_marker(listener) == ["marker"]


def test_migrating_back_recreates_the_trigger_as_it_was(listener, forward_at_the_end):
    made = importlib.import_module("jobs.migrations.0004_jobevent_notify_trigger")
    dropped = importlib.import_module("jobs.migrations.0021_drop_jobevent_notify_trigger")
    assert (dropped.CREATE, dropped.DROP) == (made.CREATE, made.DROP)
    migrate_jobs("0020_lighter_history_indexes")
    assert trigger_exists()
    event = insert_event()
    assert notified_then_marker(listener) == [f"{event}-{event}", "marker"]
    migrate_jobs("0021_drop_jobevent_notify_trigger")
    assert not trigger_exists()
