"""Benchmarks that print figures; never part of the test run (see docs/benchmarks.md)."""

import atexit
import os


def setup_django(settings_module: str | None = None) -> None:
    """Django for a bench process: the project's database server running first (the
    embedded PostgreSQL of this checkout when ``DATABASE_URL`` is unset, stopped again
    when the process that started it ends), then the apps."""
    if settings_module is not None:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    from project import embedded_db

    embedded_db.ensure_started()
    atexit.register(_stop_what_this_process_started)
    import django

    django.setup()


def _stop_what_this_process_started() -> None:
    from project import embedded_db

    for data_dir in embedded_db.started_by_this_process():
        embedded_db.stop(data_dir)


def scratch_database(prefix: str) -> tuple[str, str, str]:
    """``(server URL, scratch URL, scratch name)``: a database named for this process on
    the project's server (the embedded PostgreSQL of this checkout when ``DATABASE_URL``
    is unset), for a bench that creates and drops it with ``run_sql``."""
    from pathlib import Path
    from urllib.parse import quote, urlsplit, urlunsplit

    name = f"{prefix}_{os.getpid()}"
    url = os.environ.get("DATABASE_URL")
    if url is None:
        from project import embedded_db

        server = embedded_db.ensure_running(Path(__file__).resolve().parent.parent / "var" / "pg")
        return server.url("postgres"), server.url(name), name
    parts = urlsplit(url)
    return (urlunsplit(parts._replace(path="/postgres")),
            urlunsplit(parts._replace(path="/" + quote(name))), name)


def run_sql(url: str, *statements: str) -> None:
    """Each statement in autocommit (CREATE and DROP DATABASE refuse a transaction)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)
