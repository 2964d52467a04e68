"""Project-wide guarantees: migrations in step, architecture contracts, system checks."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection, models

from tests.support import typecheck

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_migrations_match_the_models():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


# The apps whose constraints and indexes are named ``<app label>_…``: one namespace per
# app in PostgreSQL, where every index shares the schema with every table.
PRODUCT_APPS = ["jobs", "tenancy", "intake", "factors", "ingest", "market", "exports"]


def _product_models() -> Iterator[tuple[str, type[models.Model]]]:
    for label in PRODUCT_APPS:
        for model in apps.get_app_config(label).get_models(include_auto_created=True):
            yield label, model


def test_every_constraint_and_index_of_a_model_is_named_for_its_app():
    unprefixed = [
        f"{model._meta.label}: {item.name}"
        for label, model in _product_models()
        for item in [*model._meta.constraints, *model._meta.indexes]
        if not item.name.startswith(f"{label}_")
    ]
    assert not unprefixed, "named without their app's label:\n" + "\n".join(unprefixed)


# Django's own names end in a hash of the table and columns (a foreign key's index and
# constraint, a pattern index, a unique constraint added later), after the table's name,
# cut to no fewer than 20 characters when the whole would pass PostgreSQL's 63.
HASHED = re.compile(r"_[0-9a-f]{8}(_like|_uniq|_check|_fk_\w+)?$")


def _generated(name: str, model: type[models.Model]) -> bool:
    """A name Django or PostgreSQL chose from the table's: the primary key, a column's
    UNIQUE or CHECK written in CREATE TABLE, or one of Django's hashed names."""
    table = model._meta.db_table
    columns = [field.column for field in model._meta.local_concrete_fields]
    written = {f"{table}_pkey"} | {
        f"{table}_{column}_{kind}" for column in columns for kind in ("key", "check")
    }
    return name in written or (name.startswith(table[:20]) and HASHED.search(name) is not None)


@pytest.mark.django_db
def test_every_constraint_and_index_in_the_database_is_named_for_its_app():
    """What the migrations built, SQL written by hand included, on the apps' tables."""
    tables = {model._meta.db_table: (label, model) for label, model in _product_models()}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT t.relname, i.relname FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            WHERE t.relnamespace = current_schema()::regnamespace AND t.relname = ANY(%(tables)s)
            UNION
            SELECT t.relname, c.conname FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
            WHERE t.relnamespace = current_schema()::regnamespace AND t.relname = ANY(%(tables)s)
            ORDER BY 1, 2
            """,
            {"tables": list(tables)},
        )
        found = cursor.fetchall()
    assert {table for table, _ in found} == set(tables)
    unprefixed = [
        f"{table}: {name}"
        for table, name in found
        if not name.startswith(f"{tables[table][0]}_") and not _generated(name, tables[table][1])
    ]
    assert not unprefixed, "named without their app's label:\n" + "\n".join(unprefixed)


def test_import_contracts_hold():
    """jobs imports neither the console nor a pipeline; pipelines don't import each other;
    only jobs and the console talk to django-q2 and channels (pyproject.toml
    [tool.importlinter])."""
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
    that has fewer has its count lowered there (``python -m tests.support.typecheck --update``)."""
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


def test_an_override_naming_an_unknown_schedule_is_a_system_check_error(settings):
    from jobs import checks

    settings.JOBS_SCHEDULE_OVERRIDES = {"nightly": None, "market-daily-batch": {"cron": "0 * * * *"}}
    assert [error.id for error in checks.check_handlers()] == ["jobs.E002"]


@pytest.mark.parametrize("override", [{"cron": "0 * * * *", "job": "tests.noop"}, {}, "0 * * * *"])
def test_an_override_that_neither_retimes_nor_disables_is_a_system_check_error(settings, override):
    from jobs import checks

    settings.JOBS_SCHEDULE_OVERRIDES = {"market-daily-batch": override}
    assert [error.id for error in checks.check_handlers()] == ["jobs.E004"]


def test_a_schedule_name_two_handlers_declare_is_a_system_check_error():
    from jobs import checks, registry

    schedule = registry.Cron("0 3 * * *", name="market-daily-batch")
    registry.register(registry.Handler(name="tests.impostor", func=lambda ctx: None, schedule=schedule))
    try:
        errors = checks.check_handlers()
    finally:
        registry.unregister("tests.impostor")
    assert [error.id for error in errors] == ["jobs.E003"]
    assert "market.Tick and tests.impostor" in errors[0].msg


@pytest.mark.parametrize(("heartbeat", "warned"), [(1.5, False), (2, True)])
def test_a_heartbeat_slower_than_a_quarter_of_the_lease_is_a_system_check_warning(
    settings, heartbeat, warned
):
    from jobs import checks

    settings.JOBS_LEASE_SECONDS, settings.JOBS_HEARTBEAT_SECONDS = 6, heartbeat
    assert bool(checks.check_lease()) is warned
