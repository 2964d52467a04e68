"""``manage.py factors_ingest_api``: entries of one report module from an HTTP JSON source."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console.cli import actor, must_reach
from factors import services
from factors.management.commanding import add_user_argument, module_of, run
from factors.models import DataEntry


class Command(BaseCommand):
    help = (
        "Start an api_ingest: the job reads the URL's JSON entries, validates them as an "
        "upload would be, and replaces the earlier API entries of the module and type."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("report", type=int, help="The carbon report's id.")
        parser.add_argument("module", help="travel, energy or purchases.")
        parser.add_argument("data_entry_type", help="plane, train, car, electricity …")
        parser.add_argument("url", help="An http or https URL answering JSON.")
        add_user_argument(parser)

    def handle(
        self,
        *args: Any,
        report: int,
        module: str,
        data_entry_type: str,
        url: str,
        user: str | None,
        **options: Any,
    ) -> None:
        target, who = module_of(report, module), actor(user, DataEntry)
        must_reach(who, target.report.unit.tenant_id, f"report {report}")
        run(self, lambda: services.ingest_from_api(target, data_entry_type, url, actor=who))
