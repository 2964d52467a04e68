"""Project-wide guarantees: migrations in step, architecture contracts, system checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from tests import typecheck

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_migrations_match_the_models():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_import_contracts_hold():
    """jobs imports no pipeline; pipelines don't import each other; only jobs talks to
    django-q2 and channels (pyproject.toml [tool.importlinter])."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_linted_and_formatted():
    """ruff's rules ([tool.ruff] in pyproject.toml) hold and ``ruff format`` has nothing to
    change: run ``ruff format .`` and ``ruff check --fix .`` to put a change right."""
    ruff = Path(sys.executable).with_name("ruff")
    lint = subprocess.run([str(ruff), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    layout = subprocess.run([str(ruff), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert layout.returncode == 0, layout.stdout + layout.stderr


def test_type_errors_only_fall():
    """No module has more mypy errors than tests/mypy-baseline.json allows, and a module
    that has fewer has its count lowered there (``python -m tests.typecheck --update``)."""
    found, lines = typecheck.run_mypy()
    allowed = typecheck.baseline()
    worse = typecheck.grown(found, allowed)
    assert not worse, "more type errors than the baseline allows:\n" + "\n".join(
        line for line in lines if typecheck.ERROR.match(line)["path"] in worse
    )
    better = typecheck.shrunk(found, allowed)
    assert not better, f"fewer type errors than the baseline: lower it ({better})"


def test_system_checks_pass():
    call_command("check", fail_level="WARNING")


def test_a_duplicate_handler_name_is_a_system_check_error():
    from jobs import checks, registry

    def impostor(ctx):
        return None

    registry.register(registry.Handler(name="tests.noop", func=impostor))
    try:
        ids = [error.id for error in checks.check_handlers()]
        assert "jobs.E001" in ids
    finally:
        registry._duplicates.clear()


def test_a_schedule_naming_an_unknown_job_type_is_a_system_check_error(settings):
    from jobs import checks

    settings.JOBS_SCHEDULES = {"nightly": {"job": "nope.missing", "cron": "0 3 * * *"}}
    assert [error.id for error in checks.check_handlers()] == ["jobs.E002"]


@pytest.mark.parametrize(("heartbeat", "warned"), [(1.5, False), (2, True)])
def test_a_heartbeat_slower_than_a_quarter_of_the_lease_is_a_system_check_warning(
    settings, heartbeat, warned
):
    from jobs import checks

    settings.JOBS_LEASE_SECONDS, settings.JOBS_HEARTBEAT_SECONDS = 6, heartbeat
    assert bool(checks.check_lease()) is warned
