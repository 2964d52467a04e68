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
