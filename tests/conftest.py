from __future__ import annotations

import os
import shutil

import pytest
from django.conf import settings
from django.db import connection

from devtools import embedded_db

# The clock fixture; real processes (processes, private_database …) and their helpers.
pytest_plugins = ["jobs.testing", "tests.support.processes"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the embedded PostgreSQL (DATABASE_URL unset) before any test needs it: the
    settings only say where it listens."""
    embedded_db.ensure_started()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop this run's throttle counts and snapshot files (project/test_settings.py names
    their directories)."""
    cache = settings.CACHES["default"]
    if cache["BACKEND"].endswith("FileBasedCache"):
        shutil.rmtree(cache["LOCATION"], ignore_errors=True)
    shutil.rmtree(os.environ["EXPORTS_STORAGE_URL"], ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the embedded PostgreSQL if this run started it (DATABASE_URL unset and none was
    running): last, after the test database is gone. One the run found running belongs
    to whoever started it (a ./conveyor start, another run) and is left alone."""
    for data_dir in embedded_db.started_by_this_process():
        embedded_db.stop(data_dir)


@pytest.fixture
def hits_table(django_db_blocker):
    """tests_hits(job_id UNIQUE): handlers insert one row per run, duplicates conflict."""
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS tests_hits (job_id bigint PRIMARY KEY, worker_pid integer NOT NULL)"
        )
        cursor.execute("TRUNCATE tests_hits")
    yield "tests_hits"
