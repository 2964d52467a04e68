"""``manage.py factors_clean_uploads``: delete old staged uploads nobody will ingest."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from factors import conf


class Command(BaseCommand):
    help = ("Delete staged uploads older than --days (default 30). An ingest deletes its file "
            "when it succeeds; files of failed jobs stay so that a retry can run.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=float, default=30.0)
        parser.add_argument("--dry-run", action="store_true", help="List, delete nothing.")

    def handle(self, *args: Any, days: float, dry_run: bool, **options: Any) -> None:
        directory = conf.upload_dir()
        cutoff = time.time() - days * 86400
        old = [p for p in directory.glob("*") if p.is_file() and p.stat().st_mtime < cutoff] \
            if directory.exists() else []
        for path in old:
            if not dry_run:
                path.unlink(missing_ok=True)
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(f"{verb} {len(old)} staged upload(s) older than {days:g} days "
                          f"in {directory}.")
