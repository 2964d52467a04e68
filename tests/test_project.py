"""Project-wide guarantees: migrations in step, architecture contracts, system checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

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
