#!/usr/bin/env python
"""Django's command-line utility for Conveyor."""

import os
import sys

# Commands that never need a connection: they must not start the embedded PostgreSQL
# (makemigrations only checks the migration history when a server answers, and warns
# otherwise). Every other command gets a running server first, an export worker too: it
# reaches Conveyor over HTTP, but reads its datasets from the app's database unless
# EXPORTS_POSTGRES_URL names another.
WITHOUT_DATABASE = {
    "check",
    "makemigrations",
    "help",
    "version",
    "diffsettings",
    "collectstatic",
    "findstatic",
    "spectacular",
}


def needs_database(argv: list[str]) -> bool:
    """Whether the command in ``argv`` may connect (no command, or only help, does not)."""
    if len(argv) < 2 or argv[1] in WITHOUT_DATABASE or argv[1].startswith("-"):
        return False
    return not {"-h", "--help", "--version"} & set(argv[2:])


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.management import execute_from_command_line

    if needs_database(sys.argv):
        start_embedded_database()
    execute_from_command_line(sys.argv)


def start_embedded_database() -> None:
    """Start the embedded PostgreSQL if the settings name one (``DATABASE_URL`` unset, in
    a checkout); in the image there is none, and nothing of devtools to import.

    Here rather than on a connection's first use: starting a server takes seconds and
    forks a postmaster, which belongs at a command's start, not in the middle of whatever
    query first needs it; and settings stay free of side effects."""
    from django.conf import settings

    if settings.EMBEDDED_POSTGRES_DIR:
        from devtools import embedded_db

        embedded_db.ensure_started()


if __name__ == "__main__":
    main()
