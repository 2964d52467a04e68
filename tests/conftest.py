from __future__ import annotations

import pytest
from django.db import connection


@pytest.fixture
def hits_table(django_db_blocker):
    """tests_hits(job_id UNIQUE): handlers insert one row per run, duplicates conflict."""
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS tests_hits (job_id bigint PRIMARY KEY, "
                       "worker_pid integer NOT NULL)")
        cursor.execute("TRUNCATE tests_hits")
    yield "tests_hits"


def hit_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM tests_hits")
        return cursor.fetchone()[0]
