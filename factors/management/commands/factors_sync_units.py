"""``manage.py factors_sync_units``: apply the unit directory of one year."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.cli import actor
from factors import conf, services
from factors.management.commanding import add_user_argument, opened, run
from factors.models import Unit


class Command(BaseCommand):
    help = (
        "Start a unit_sync for a year from a directory file (CSV or JSON) or a JSON "
        "endpoint (default FACTORS_UNITS_URL). Listed units get that year's report."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("year", type=int)
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--file", help="A directory file, .csv or .json.")
        source.add_argument("--url", help="A JSON endpoint (http or https).")
        add_user_argument(parser)

    def handle(
        self, *args: Any, year: int, file: str | None, url: str | None, user: str | None, **options: Any
    ) -> None:
        who = actor(user, Unit, platform=True)
        url = url or (None if file else conf.units_url() or None)
        if not file and not url:
            raise CommandError("give --file or --url (no FACTORS_UNITS_URL is configured)")
        with opened(file) if file else nullcontext() as handle:
            run(
                self,
                lambda: services.sync_units(year, source=handle, filename=file or "", url=url, actor=who),
            )
