"""``manage.py jobs_prune``: delete finished jobs past their retention."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobs import conf, retention
from jobs.management.tables import duration, table


class Command(BaseCommand):
    help = ("Delete finished jobs older than their state's retention (JOBS_RETENTION; "
            "failures are kept longer). --dry-run only counts.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true",
                            help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        ages = conf.retention()
        counts = retention.prunable() if dry_run else retention.prune()
        rows = [[state, duration(ages[state]), counts.get(state, 0)] for state in ages]
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(table(["state", "kept for", verb], rows))
        total = sum(counts.values())
        message = f"{'Would delete' if dry_run else 'Deleted'} {total} finished job(s)."
        self.stdout.write(self.style.SUCCESS(message) if not dry_run else message)
