"""``manage.py factors_recalculate``: recalculate the emissions of a data-entry type."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console.cli import actor
from factors import services
from factors.management.commanding import add_user_argument, run
from factors.models import EmissionFactor


class Command(BaseCommand):
    help = (
        "Start an emission_recalc of every entry of a type (of one year with --year); "
        "the modules touched are then re-aggregated."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("data_entry_type", help="plane, train, car, electricity …")
        parser.add_argument("--year", type=int)
        add_user_argument(parser)

    def handle(
        self, *args: Any, data_entry_type: str, year: int | None, user: str | None, **options: Any
    ) -> None:
        who = actor(user, EmissionFactor, platform=True)
        run(self, lambda: services.recalculate_emissions(data_entry_type, year=year, actor=who))
