"""The job table's storage layout, which the engine's speed relies on."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_the_job_table_leaves_room_on_its_pages_for_a_started_jobs_new_version():
    # A start rewrites the row without touching an indexed column: with room on its page
    # it is a heap-only update (bench/hot_updates.py measures how many).
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'jobs_job'")
        assert cursor.fetchone()[0] == ["fillfactor=70"]
