"""``manage.py factors_prune_loads``: delete the rows of ingests nobody will read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from factors import conf, entry_loads
from factors.models import EntryLoad


class Command(BaseCommand):
    help = (
        "Delete the rows of replaced loads, and of loads that will never become current "
        "(their ingest or its closing recalculation failed or was cancelled) once every "
        "job of their pipeline has been finished for --hours (default "
        "FACTORS_ABANDONED_LOAD_HOURS). The factors.prune_loads job does this hourly."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--hours", type=float, default=None, help="Age of an abandoned load before it goes (0: now)."
        )
        parser.add_argument("--dry-run", action="store_true", help="List, delete nothing.")

    def handle(self, *args: Any, hours: float | None, dry_run: bool, **options: Any) -> None:
        if hours is not None and not 0 <= hours < 1e6:
            raise CommandError(f"--hours must be between 0 and 1,000,000, not {hours:g}")
        age = conf.abandoned_load_age() if hours is None else timedelta(hours=hours)
        if dry_run:
            ids = entry_loads.removable(older_than=age)
            loads = EntryLoad.objects.filter(job_id__in=ids).order_by("job_id")
            for load in loads:
                self.stdout.write(
                    f"would remove {load} of module {load.module_id} ({load.data_entry_type}, {load.source})"
                )
            self.stdout.write(f"Would remove {len(ids)} load(s).")
            return
        pruned = entry_loads.prune(older_than=age)
        self.stdout.write(f"Removed {pruned.loads} load(s), {pruned.rows} row(s).")
