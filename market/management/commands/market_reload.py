"""``manage.py market_reload``: load chosen days of a feed again, whether or not they have
bars (a restatement the batch did not pick up), as the admin's *Reload days* does.

It prints the preview (each day: trading or not, its bars, the load covering it) and
then queues the loads, recorded on the feed as a ``reload`` action (via ``command``) with
the reason. ``--dry-run`` prints the preview and writes nothing. Whatever is wrong (no
such tenant or feed, a bad range, a day the calendar does not know, nothing to reload, no
reason) is said on stderr with a non-zero exit, and nothing is queued.
"""

from __future__ import annotations

import argparse
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.cli import actor, must_reach
from market import services
from market.models import MarketFeed
from tenancy.models import Tenant


def a_date(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD)") from None


class Command(BaseCommand):
    help = (
        "Load chosen days of a market feed again (--start/--end, or --day ...), whether or not "
        "they have bars, with a --reason kept in the feed's history; --dry-run previews only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--feed", metavar="NAME", required=True, help="The feed's name.")
        parser.add_argument("--tenant", metavar="SLUG", help="The feed's tenant (when several have one).")
        parser.add_argument("--start", metavar="YYYY-MM-DD", type=a_date, help="The range's first day.")
        parser.add_argument(
            "--end", metavar="YYYY-MM-DD", type=a_date, help="The range's last day (included)."
        )
        parser.add_argument(
            "--day",
            metavar="YYYY-MM-DD",
            type=a_date,
            action="append",
            default=[],
            help="A day to reload (repeat it); instead of a range.",
        )
        parser.add_argument("--reason", default="", help="Why (required unless --dry-run).")
        parser.add_argument("--dry-run", action="store_true", help="Preview only: queue nothing.")
        parser.add_argument(
            "--user",
            metavar="USERNAME",
            help="Record this (existing) user as the one who asked; they need the operate permission.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        feed = self.feed(options["feed"], options["tenant"])
        who = actor(options["user"], MarketFeed)
        must_reach(who, feed.tenant_id, f"feed {feed.name!r}")
        try:
            days = self.days(options["start"], options["end"], options["day"])
            preview = services.preview_reload(feed, days)
            self.stdout.write(self.describe(feed, preview))
            if options["dry_run"]:
                refusal = preview.refusal()
                if refusal:
                    raise services.ReloadRefused(refusal)
                self.stdout.write("Dry run: nothing queued.")
                return
            preview, loads = services.reload(feed, days, actor=who, via="command", reason=options["reason"])
        except services.ReloadRefused as exc:
            raise CommandError(f"reload of {feed.name} refused: {exc}") from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Queued {len(loads)} load(s): "
                + ", ".join(f"{load.trade_date} (load {load.pk}, job {load.job_id})" for load in loads)
            )
        )

    def feed(self, name: str, slug: str | None) -> MarketFeed:
        feeds = MarketFeed.objects.select_related("tenant").filter(name=name)
        if slug is not None:
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                raise CommandError(f"no tenant {slug!r}")
            feeds = feeds.filter(tenant=tenant)
        found = list(feeds[:10])
        if not found:
            raise CommandError(f"no market feed {name!r}" + (f" of tenant {slug!r}" if slug else ""))
        if len(found) > 1:
            tenants = ", ".join(sorted(feed.tenant.slug for feed in found))
            raise CommandError(
                f"several tenants have a feed named {name!r} ({tenants}): name one with --tenant"
            )
        return found[0]

    def days(self, start: date | None, end: date | None, chosen: list[date]) -> list[date]:
        if chosen and (start or end):
            raise CommandError("give a range (--start and --end) or days (--day), not both")
        if chosen:
            return chosen
        if start is None or end is None:
            raise CommandError("give a range (--start and --end) or days (--day)")
        return services.days_between(start, end)

    def describe(self, feed: MarketFeed, preview: services.ReloadPreview) -> str:
        lines = [f"Reload of {feed.name} ({feed.tenant.slug}), {preview.start} … {preview.end}:"]
        for row in preview.rows:
            load = row.covered_by
            if load is not None:
                what = f"covered by load {load.pk} (job {load.job_id}, {load.status})"
            elif row.calendar == "open":
                what = "fetch"
            elif row.calendar == "closed":
                what = "skipped: not a trading day"
            else:
                what = "the calendar does not know it"
            lines.append(f"  {row.day:%Y-%m-%d %a}  {row.calendar:<7}  {row.bars:>7,} bars  {what}")
        lines.append(f"{len(preview.to_fetch)} day(s) to fetch, {preview.api_calls} API call(s).")
        return "\n".join(lines)
