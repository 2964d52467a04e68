"""``manage.py demo [factors|ingest|market|exports|all]``: the demos a new user finds,
each loaded through the pipelines an operator uses, each idempotent (a demo already
loaded is left as it is): a filled CO2 report (``factors``), an ingest source with a
finished run (``ingest``), a market-data feed with its last week (``market``, against
the API named by ``--api-url``) and a queued snapshot (``exports``). ``all``, the
default, runs them in that order.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.demos import exports, factors, ingest, market

DEMOS = ["factors", "ingest", "market", "exports"]


class Command(BaseCommand):
    help = "Load the demos (idempotent): a CO2 report, an ingest run, a market-data feed, a snapshot."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("demo", nargs="?", choices=[*DEMOS, "all"], default="all", help="Default: all.")
        parser.add_argument(
            "--user", metavar="USERNAME", help="Record this (existing) user as the one who asked."
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=300.0,
            help="factors: seconds to wait for each step's jobs (default 300).",
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=ingest.WAIT_SECONDS,
            metavar="SECONDS",
            help="ingest, with a cluster running: how long to wait for it to finish the "
            f"run (default {ingest.WAIT_SECONDS}).",
        )
        parser.add_argument("--api-url", help="market: the market-data API to call (required for it).")
        parser.add_argument("--token", default="demo-token", help="market: the API's token.")

    def handle(self, *args: Any, demo: str, user: str | None, **options: Any) -> None:
        chosen = DEMOS if demo == "all" else [demo]
        if "market" in chosen and not options["api_url"]:
            raise CommandError(
                "the market demo needs --api-url, the market-data API its feed calls "
                "(python -m devtools.fakes.market_api runs a fake one)"
            )
        actor = self._actor(user)
        write = self.stdout.write
        for name in chosen:
            if name == "factors":
                factors.load(write, actor=actor, timeout=options["timeout"])
            elif name == "ingest":
                ingest.load(write, actor=actor, wait=options["wait"])
            elif name == "market":
                market.load(write, actor=actor, api_url=options["api_url"], token=options["token"])
            else:
                exports.load(write, actor=actor)

    @staticmethod
    def _actor(username: str | None) -> Any:
        if username is None:
            return None
        try:
            return get_user_model()._default_manager.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None
