"""``manage.py ingest_check``: the market data watchdog, for cron and for people. Its
name is older than the market app: crontabs and the CronJob
(``deploy/base/market-watchdog.yaml``) call it by that name.

Prints one line per finding (``OK …`` or ``ALERT …``) and exits 0 when all are OK, 1
when any is an alert, and 2 when it cannot check as asked (a bad option, no such tenant,
no feed to check, a log it cannot append to), so that cron tells a broken watchdog from
an alert. ``--log FILE`` appends the lines, each stamped with the time of the check, to a
file as well.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import jobs
from market import services
from market.models import MarketFeed
from tenancy.models import Tenant

USAGE = 2  # argparse's code for a bad option; Django's CommandError would exit 1, as an alert


class Command(BaseCommand):
    help = (
        "Check the market data: the latest daily date is recent, no source's last "
        "attempt failed, the latest trading day has enough rows, no open day before the "
        "gap-fill's look-back lacks its bars. Exit 0 OK, 1 ALERT."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", metavar="SLUG", help="Only this tenant's feeds.")
        parser.add_argument("--feed", metavar="NAME", help="Only the feeds of this name.")
        parser.add_argument("--log", metavar="FILE", type=Path, help="Also append the findings to FILE.")

    def handle(
        self, *args: Any, tenant: str | None, feed: str | None, log: Path | None, **options: Any
    ) -> None:
        feeds = (
            MarketFeed.objects.filter(enabled=True).select_related("tenant").order_by("tenant__slug", "name")
        )
        if tenant:
            found = Tenant.objects.filter(slug=tenant).first()
            if found is None:
                raise CommandError(f"no tenant {tenant!r}", returncode=USAGE)
            feeds = feeds.filter(tenant=found)
        if feed:
            feeds = feeds.filter(name=feed)
        chosen = list(feeds)
        if not chosen:
            raise CommandError(
                "no enabled market feed"
                + (f" named {feed!r}" if feed else "")
                + (f" of tenant {tenant!r}" if tenant else ""),
                returncode=USAGE,
            )
        now = jobs.now()
        findings = services.check(chosen, now)
        lines = [finding.line() for finding in findings]
        alert = not all(finding.ok for finding in findings)
        lines.append(
            f"{'ALERT' if alert else 'OK'}: {sum(not f.ok for f in findings)} "
            f"alert(s) in {len(findings)} check(s)"
        )
        self.stdout.write("\n".join(lines))  # first: a log that fails loses no finding
        if log is not None:
            try:
                with log.open("a", encoding="utf-8") as out:
                    out.writelines(f"{now:%Y-%m-%dT%H:%M:%SZ} {line}\n" for line in lines)
            except OSError as exc:
                raise CommandError(f"cannot append to {log}: {exc.strerror}", returncode=USAGE) from exc
        if alert:
            sys.exit(1)
