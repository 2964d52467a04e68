"""``manage.py jobs_recover_stale``: run the reaper now instead of waiting for its round."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from jobs import reaper
from jobs.management.tables import positive_int, table


class Command(BaseCommand):
    help = (
        "Take running jobs whose lease expired (their worker died) back to pending, or "
        "fail them when their attempts are spent; then wake workers for due jobs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--limit",
            type=positive_int,
            default=500,
            help="Rescue at most this many jobs in this run (default 500).",
        )

    def handle(self, *args: Any, limit: int, **options: Any) -> None:
        # The rescue locks the expired rows (skip locked), so it needs a transaction; a
        # worker's reaper running at the same moment simply skips the rows we hold.
        with transaction.atomic():
            result = reaper.rescue_expired(limit=limit)
            woken = reaper.wake_due()
        if result.jobs:
            self.stdout.write(table(["job", "type", "now"], result.jobs))
        self.stdout.write(
            self.style.SUCCESS(
                f"Rescued {result.rescued} job(s) back to pending, failed {result.failed} "
                f"with attempts spent; woke {woken} queue(s) with due jobs."
            )
        )
