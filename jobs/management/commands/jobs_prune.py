"""``manage.py jobs_prune``: delete finished jobs past their retention."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobs import conf, retention
from jobs.management.tables import duration, table


class Command(BaseCommand):
    help = (
        "Delete finished jobs older than their state's retention (JOBS_RETENTION; "
        "failures are kept longer) with their history, the events nobody is left to "
        "deliver and the channel layer's expired rows. --dry-run deletes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Run the prune in a transaction and roll it back: exactly what it would "
            "delete now, and nothing deleted.",
        )

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        ages = conf.retention()
        pruned = retention.prune(dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(
            table(
                ["state", "kept for", verb],
                [[state, duration(ages[state]), pruned.jobs.get(state, 0)] for state in ages],
            )
        )
        self.stdout.write("")
        self.stdout.write(table(["rows of", verb], list(pruned.rows.items())))
        message = (
            f"{verb.capitalize()} {sum(pruned.jobs.values())} finished job(s); "
            f"{sum(pruned.rows.values())} row(s) in all."
        )
        self.stdout.write(message if dry_run else self.style.SUCCESS(message))
