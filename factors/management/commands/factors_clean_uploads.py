"""``manage.py factors_clean_uploads``: delete old staged uploads nobody will ingest."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from factors import conf
from factors.models import Upload


class Command(BaseCommand):
    help = ("Delete staged uploads older than --days (default 30), with their records. An "
            "ingest deletes its file when it succeeds; files of failed jobs stay so that a "
            "retry can run.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=float, default=30.0)
        parser.add_argument("--dry-run", action="store_true", help="List, delete nothing.")

    def handle(self, *args: Any, days: float, dry_run: bool, **options: Any) -> None:
        directory = conf.upload_dir()
        cutoff = time.time() - days * 86400
        old = [p for p in directory.glob("*") if p.is_file() and p.stat().st_mtime < cutoff] \
            if directory.exists() else []
        records = Upload.objects.filter(created_at__lt=timezone.now() - timedelta(days=days))
        # Each file deleted takes its record along; old records whose file is already
        # gone (removed by hand, a lost volume) go too.
        stale_ids = {_upload_id(p.stem) for p in old} - {None}
        if not dry_run:
            for path in old:
                path.unlink(missing_ok=True)
            removed, _ = (records | Upload.objects.filter(pk__in=stale_ids)).delete()
        else:
            removed = (records | Upload.objects.filter(pk__in=stale_ids)).count()
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(f"{verb} {len(old)} staged upload(s) and {removed} record(s) older "
                          f"than {days:g} days in {directory}.")


def _upload_id(stem: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(stem)
    except ValueError:
        return None
