"""``manage.py factors_clean_uploads``: delete old staged uploads nobody will ingest."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from factors import staging
from factors.models import Upload


class Command(BaseCommand):
    help = (
        "Delete staged uploads older than --days (default 30), with their records. An "
        "ingest deletes its file when it succeeds; files of failed jobs stay so that a "
        "retry can run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=float, default=30.0)
        parser.add_argument("--dry-run", action="store_true", help="List, delete nothing.")

    def handle(self, *args: Any, days: float, dry_run: bool, **options: Any) -> None:
        store = staging.store()
        age = timedelta(days=days)
        old = store.older_than(age)
        records = Upload.objects.filter(created_at__lt=timezone.now() - age)
        # Each file deleted takes its record along; old records whose file is already
        # gone (removed by hand, a lost volume) go too.
        stale_ids = {uuid.UUID(found.staged_id) for found in old if found.staged_id}
        if not dry_run:
            for found in old:
                store.remove(found)
            removed, _ = (records | Upload.objects.filter(pk__in=stale_ids)).delete()
        else:
            removed = (records | Upload.objects.filter(pk__in=stale_ids)).count()
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb} {len(old)} staged upload(s) and {removed} record(s) older "
            f"than {days:g} days in {store.url}."
        )
