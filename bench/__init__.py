"""Benchmarks that print figures; never part of the test run (see docs/benchmarks.md)."""

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def setup_django(settings_module: str | None = None) -> None:
    """Django for a bench process: the project's database server running first (the
    embedded PostgreSQL of this checkout when ``DATABASE_URL`` is unset, stopped again
    when the process that started it ends), then the apps."""
    if settings_module is not None:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    from devtools import embedded_db

    embedded_db.ensure_started()
    atexit.register(_stop_what_this_process_started)
    import django

    django.setup()


def _stop_what_this_process_started() -> None:
    from devtools import embedded_db

    for data_dir in embedded_db.started_by_this_process():
        embedded_db.stop(data_dir)


@contextlib.contextmanager
def scratch_project(prefix: str, **settings: str) -> Iterator[Path]:
    """A bench process's own database and ``var`` folder, for the block.

    The database, named for this process, is created on the project's server (the
    embedded PostgreSQL of this checkout when ``DATABASE_URL`` is unset) and the process's
    environment points Django at it and at a fresh folder (yielded), with ``settings`` as
    further environment variables; Django is set up by the bench afterwards. Both are
    removed when the block ends, whatever happened.
    """
    admin_url, scratch_url, name = _scratch_urls(prefix)
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    _run_sql(admin_url, drop, f'CREATE DATABASE "{name}"')
    work = Path(tempfile.mkdtemp(prefix=f"{prefix.replace('_', '-')}-"))
    os.environ.update(
        DATABASE_URL=scratch_url,
        CONVEYOR_VAR_DIR=str(work),
        CONVEYOR_ALLOW_DEV_SECRET="1",
        DJANGO_SETTINGS_MODULE="project.settings",
        LOG_LEVEL="WARNING",
        **settings,
    )
    try:
        yield work
    finally:
        with contextlib.suppress(Exception):  # Django may not have been set up
            from django.db import connections

            connections.close_all()
        _run_sql(admin_url, drop)
        shutil.rmtree(work, ignore_errors=True)


def _scratch_urls(prefix: str) -> tuple[str, str, str]:
    """``(server URL, scratch URL, scratch name)`` on the project's server."""
    from urllib.parse import quote, urlsplit, urlunsplit

    name = f"{prefix}_{os.getpid()}"
    url = os.environ.get("DATABASE_URL")
    if url is None:
        from devtools import embedded_db

        server = embedded_db.ensure_running(Path(__file__).resolve().parent.parent / "var" / "pg")
        return server.url("postgres"), server.url(name), name
    parts = urlsplit(url)
    return (
        urlunsplit(parts._replace(path="/postgres")),
        urlunsplit(parts._replace(path="/" + quote(name))),
        name,
    )


def _run_sql(url: str, *statements: str) -> None:
    """Each statement in autocommit (CREATE and DROP DATABASE refuse a transaction)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)
