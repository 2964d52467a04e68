#!/usr/bin/env python
"""Django's command-line utility for Conveyor."""

import os
import sys

# Commands that never need a connection: they must not start the embedded PostgreSQL
# (makemigrations only checks the migration history when a server answers, and warns
# otherwise; an export worker reaches Conveyor over HTTP, and starts the server itself
# only when its datasets are read from it, in development). Every other command gets a
# running server first.
WITHOUT_DATABASE = {
    "check",
    "makemigrations",
    "help",
    "version",
    "diffsettings",
    "collectstatic",
    "findstatic",
    "spectacular",
    "export_worker",
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
        # Here rather than on a connection's first use: starting a server takes seconds
        # and forks a postmaster, which belongs at a command's start, not in the middle of
        # whatever query first needs it; and settings stay free of side effects.
        from project import embedded_db

        embedded_db.ensure_started()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
