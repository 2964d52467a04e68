"""``manage.py factors_upload_factors``: emission factors of one data-entry type."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console.cli import actor
from factors import services
from factors.management.commanding import add_user_argument, opened, run
from factors.models import EmissionFactor


class Command(BaseCommand):
    help = (
        "Validate a factor CSV and start factor_ingest: factors are upserted in place, "
        "those left out become stale, and the type's emissions are recalculated."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("data_entry_type", help="plane, train, car, electricity …")
        parser.add_argument("file", help="Path of the CSV file (UTF-8).")
        add_user_argument(parser)

    def handle(self, *args: Any, data_entry_type: str, file: str, user: str | None, **options: Any) -> None:
        who = actor(user, EmissionFactor, platform=True)
        with opened(file) as handle:
            run(self, lambda: services.upload_factors(data_entry_type, handle, filename=file, actor=who))
