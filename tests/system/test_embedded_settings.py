"""With DATABASE_URL unset, the settings say where the embedded PostgreSQL listens and
start nothing: importing them, ``manage.py check`` and ``makemigrations --check`` leave
no server behind. A ``manage.py`` command that may connect starts it first."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from devtools import embedded_db
from tests.support.processes import ROOT

pytestmark = pytest.mark.system


@pytest.fixture
def var_dir(embedded_var_dir: Path) -> Iterator[Path]:
    embedded_db.stop(embedded_var_dir / "pg")
    yield embedded_var_dir
    embedded_db.stop(embedded_var_dir / "pg")


def embedded_env(var_dir: Path) -> dict[str, str]:
    """A process of its own on the embedded server of ``var_dir``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CONVEYOR_", "DJANGO_")) and key != "DATABASE_URL"
    }
    env.update(
        CONVEYOR_VAR_DIR=str(var_dir),
        CONVEYOR_ALLOW_DEV_SECRET="1",
        DJANGO_SETTINGS_MODULE="project.settings",
    )
    return env


def run(var_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=embedded_env(var_dir),
        capture_output=True,
        text=True,
        timeout=180,
    )


def servers_of(var_dir: Path) -> list[int]:
    """PostgreSQL processes whose command line names a directory under ``var_dir``."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "postgres" and str(var_dir) in " ".join(process.info["cmdline"] or []):
            found.append(process.pid)
    return found


def assert_no_server(var_dir: Path) -> None:
    assert not (var_dir / "pg" / "postmaster.pid").exists()
    assert embedded_db.find(var_dir / "pg") is None
    assert servers_of(var_dir) == []


def test_importing_the_settings_starts_no_server(var_dir):
    script = "from django.conf import settings\nprint(settings.DATABASES['default']['HOST'])\n"

    result = run(var_dir, "-c", script)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == embedded_db.socket_dir(var_dir / "pg")
    assert_no_server(var_dir)


@pytest.mark.parametrize("command", [["check"], ["makemigrations", "--check", "--dry-run"]])
def test_commands_without_a_connection_start_no_server(var_dir, command):
    result = run(var_dir, "manage.py", *command)

    assert result.returncode == 0, result.stdout + result.stderr
    assert_no_server(var_dir)


def test_a_command_that_connects_starts_the_server_where_the_settings_look(var_dir):
    result = run(var_dir, "manage.py", "showmigrations", "jobs")

    assert result.returncode == 0, result.stdout + result.stderr
    server = embedded_db.find(var_dir / "pg")
    assert server is not None
    assert server.socket_dir == embedded_db.socket_dir(var_dir / "pg")


def test_a_data_dir_too_deep_for_a_unix_socket_listens_under_tmp():
    deep = Path("/var/lib") / ("d" * 120) / "pg"

    listen = embedded_db.socket_dir(deep)

    assert listen.startswith("/tmp/conveyor-pg-")
    assert listen == embedded_db.socket_dir(deep)  # the same for every process
    assert embedded_db.socket_dir(Path("/srv/conveyor/var/pg")) == "/srv/conveyor/var/pg"
    assert not Path(listen).exists()  # named, not made


@pytest.mark.parametrize(
    ("argv", "needed"),
    [
        (["manage.py"], False),
        (["manage.py", "check", "--deploy"], False),
        (["manage.py", "makemigrations", "--check"], False),
        (["manage.py", "migrate", "--help"], False),
        (["manage.py", "migrate"], True),
        (["manage.py", "qcluster"], True),
        (["manage.py", "shell", "-c", "print(1)"], True),
        # It reaches Conveyor over HTTP, but reads datasets from the app's database unless
        # EXPORTS_POSTGRES_URL names another.
        (["manage.py", "export_worker"], True),
    ],
)
def test_manage_py_starts_the_server_only_for_commands_that_may_connect(argv, needed):
    sys.path.insert(0, str(ROOT))
    try:
        import manage
    finally:
        sys.path.remove(str(ROOT))

    assert manage.needs_database(argv) is needed
