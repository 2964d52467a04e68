"""Behind a transaction pool (PgBouncer pool_mode=transaction): the sessions that must
stay one server session go to DATABASE_SESSION_URL; the rest gives up what a transaction
pool cannot keep (server-side cursors, prepared statements, session names)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from jobs.heartbeat import label_connection
from jobs.notify import Listener, raw_connection, session_alias

ROOT = Path(__file__).resolve().parents[1]
POOL = "postgresql://conveyor@pgbouncer.invalid:6432/conveyor"
DIRECT = "postgresql://conveyor@postgres.invalid:5432/conveyor"


def loaded(**env: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import json; from django.conf import settings as s; import django; django.setup(); "
        "print(json.dumps({'aliases': sorted(s.DATABASES), "
        "'session_host': s.DATABASES.get('session', {}).get('HOST'), "
        "'layer_host': s.DATABASES['channels_postgres']['HOST'], "
        "'server_side': not s.DATABASES['default'].get('DISABLE_SERVER_SIDE_CURSORS', False), "
        "'prepared': getattr(s, 'JOBS_PREPARED_STATEMENTS', True)}))"
    )
    base = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "SECRET_KEY": "k" * 50,
        "DATABASE_URL": POOL,
    }
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_transaction_pool_sends_sessions_to_the_session_url():
    run = loaded(DATABASE_TRANSACTION_POOLING="true", DATABASE_SESSION_URL=DIRECT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "aliases": ["channels_postgres", "default", "session"],
        "session_host": "postgres.invalid",
        "layer_host": "postgres.invalid",
        "server_side": False,
        "prepared": False,
    }


def test_prepared_statements_may_be_turned_back_on_for_a_pool_that_keeps_them():
    run = loaded(
        DATABASE_TRANSACTION_POOLING="true", DATABASE_SESSION_URL=DIRECT, JOBS_PREPARED_STATEMENTS="true"
    )
    assert json.loads(run.stdout)["prepared"] is True


def test_a_transaction_pool_without_a_session_url_is_refused_naming_it():
    run = loaded(DATABASE_TRANSACTION_POOLING="true")
    assert run.returncode != 0
    assert "DATABASE_TRANSACTION_POOLING=true needs DATABASE_SESSION_URL" in run.stderr


def test_without_a_pool_everything_is_one_database():
    run = loaded()
    assert json.loads(run.stdout) == {
        "aliases": ["channels_postgres", "default"],
        "session_host": None,
        "layer_host": "pgbouncer.invalid",
        "server_side": True,
        "prepared": True,
    }


@pytest.mark.django_db
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_listen_connects_through_the_session_alias(settings):
    """A session alias that goes nowhere: the engine's listener tries it, not default."""
    from django.db import connections

    assert session_alias() == "default"
    nowhere = {
        **connections.settings["default"],
        "HOST": "127.0.0.1",
        "PORT": "9",
        "OPTIONS": {"connect_timeout": 2},
    }
    settings.DATABASES = {**settings.DATABASES, "session": nowhere}
    connections.settings["session"] = nowhere
    try:
        listener = Listener("conveyor_test")
        assert listener.alias == "session"
        assert listener._connect() is None  # refused: it backs off, the poll goes on
        with pytest.raises(psycopg.OperationalError, match="port 9"):
            raw_connection("session")
    finally:
        del connections.settings["session"]
        if hasattr(connections._connections, "session"):
            del connections["session"]


@pytest.mark.django_db
def test_sessions_are_not_named_behind_a_transaction_pool(settings):
    settings.DATABASE_TRANSACTION_POOLING = True
    label_connection("conveyor engine should-not-appear")
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('application_name')")
        assert cursor.fetchone()[0] != "conveyor engine should-not-appear"
