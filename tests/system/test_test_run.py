"""``./conveyor test`` with DATABASE_URL unset (it execs pytest): a run stops the embedded
PostgreSQL it started, and leaves one it found running to whoever started it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools import embedded_db
from tests.support.processes import ROOT

pytestmark = pytest.mark.system

# A test that needs the settings (so the database server) but no test database.
A_QUICK_TEST = "tests/test_project.py::test_system_checks_pass"


@pytest.fixture
def var_dir(embedded_var_dir: Path) -> Iterator[Path]:
    embedded_db.stop(embedded_var_dir / "pg")
    yield embedded_var_dir
    embedded_db.stop(embedded_var_dir / "pg")


def run_tests(var_dir: Path) -> subprocess.CompletedProcess[str]:
    """A test run of its own in ``var_dir``: nothing of this run's database or cache."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CONVEYOR_", "JOBS_", "DJANGO_")) and key != "DATABASE_URL"
    }
    env["CONVEYOR_VAR_DIR"] = str(var_dir)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", A_QUICK_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def last_start(data_dir: Path) -> float:
    """When a server last started in ``data_dir`` (PostgreSQL rewrites this file then)."""
    try:
        return (data_dir / "postmaster.opts").stat().st_mtime
    except FileNotFoundError:
        return 0.0


def test_a_run_stops_the_server_it_started(var_dir):
    before = last_start(var_dir / "pg")

    run = run_tests(var_dir)

    assert run.returncode == 0, run.stdout + run.stderr
    assert last_start(var_dir / "pg") > before  # it started one there
    assert embedded_db.find(var_dir / "pg") is None


def test_a_run_leaves_a_server_it_found_running(var_dir):
    embedded_db.ensure_running(var_dir / "pg")
    server = postmaster_pid(var_dir / "pg")

    run = run_tests(var_dir)

    assert run.returncode == 0, run.stdout + run.stderr
    assert embedded_db.find(var_dir / "pg") is not None
    assert postmaster_pid(var_dir / "pg") == server
