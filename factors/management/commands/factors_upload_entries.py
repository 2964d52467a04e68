"""``manage.py factors_upload_entries``: an entries CSV for one report module and type."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console.cli import actor, must_reach
from factors import services
from factors.management.commanding import add_user_argument, module_of, opened, run
from factors.models import DataEntry


class Command(BaseCommand):
    help = (
        "Validate an entries CSV and start its pipeline (csv_ingest → emission_recalc → "
        "aggregation). It replaces the earlier CSV entries of the module and type."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("report", type=int, help="The carbon report's id.")
        parser.add_argument("module", help="travel, energy or purchases.")
        parser.add_argument("data_entry_type", help="plane, train, car, electricity …")
        parser.add_argument("file", help="Path of the CSV file (UTF-8).")
        add_user_argument(parser)

    def handle(
        self,
        *args: Any,
        report: int,
        module: str,
        data_entry_type: str,
        file: str,
        user: str | None,
        **options: Any,
    ) -> None:
        target, who = module_of(report, module), actor(user, DataEntry)
        must_reach(who, target.report.unit.tenant_id, f"report {report}")
        with opened(file) as handle:
            run(
                self, lambda: services.dispatch_csv(target, data_entry_type, handle, filename=file, actor=who)
            )
