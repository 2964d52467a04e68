"""``manage.py handoff_redrive``: queue a source's failed handoffs again by filter, or
with ``--dry-run`` count them and show the oldest."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from console.cli import actor, must_reach, table
from ingest.management.commanding import source_named, tenant_named, when
from ingest.scraping import services
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff

AGE = re.compile(r"^(\d{1,9})([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def age(text: str) -> timedelta:
    found = AGE.match(text)
    if found is None:
        raise CommandError(f"--older-than {text!r}: give a number and a unit, e.g. 30m, 6h or 2d")
    seconds = int(found[1]) * UNITS[found[2]]
    if seconds > services.MAX_AGE_SECONDS:
        raise CommandError(f"--older-than {text!r}: at most {services.MAX_AGE_SECONDS // 86400}d")
    return timedelta(seconds=seconds)


class Command(BaseCommand):
    help = (
        "Queue a source's failed handoffs again (by scrape run, reason and age), "
        f"{services.BATCH} a transaction. A redrive interrupted goes on where it stopped when run "
        "again with the --failed-before it printed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", required=True, help="The source's name.")
        parser.add_argument("--tenant", metavar="SLUG", help="The source's tenant.")
        parser.add_argument(
            "--status",
            choices=[HandoffStatus.FAILED.value],
            default=HandoffStatus.FAILED.value,
            help="Only failed handoffs are redriven.",
        )
        parser.add_argument(
            "--reason", action="append", choices=HandoffReason.values, help="A reason code (repeatable)."
        )
        parser.add_argument("--scrape-run", metavar="RUN_ID", help="The scraper's run id.")
        parser.add_argument(
            "--older-than", metavar="AGE", help="Last changed at least this long ago (6h, 2d)."
        )
        parser.add_argument(
            "--failed-before",
            metavar="DATETIME",
            help="Last changed before this (ISO 8601): resume a redrive.",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count and show; change nothing.")
        parser.add_argument("--note", default="", help="Why, on each handoff's history.")
        parser.add_argument(
            "--user", metavar="USERNAME", help="Record this (existing) user as the one who asked."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        found = source_named(options["source"], tenant_named(options["tenant"]))
        who = actor(options["user"], IngestionHandoff)
        must_reach(who, found.tenant_id, f"source {found.name!r}")
        older_than = options["older_than"]
        try:
            chosen = services.RedriveFilter(
                found,
                scrape_run_id=options["scrape_run"],
                reasons=tuple(options["reason"] or ()),
                failed_before=self.bound(options["failed_before"]),
                older_than=age(older_than) if older_than else None,
            )
        except services.RedriveRefused as exc:
            raise CommandError(str(exc)) from exc
        if options["dry_run"]:
            seen = services.preview_redrive(chosen)
            self.stdout.write(
                f"{seen.count} failed handoff(s) of {found.name} ({found.tenant.slug}) would be "
                f"queued again (failed before {seen.failed_before.isoformat()})."
            )
            rows = [
                [h.pk, h.reference.external_id, h.scrape_run.run_id, h.reason_code, when(h.updated_at)]
                for h in seen.sample
            ]
            if rows:
                self.stdout.write(table(["id", "external id", "scrape run", "reason", "updated"], rows))
            return
        done = services.redrive(chosen, actor=who, via="command", note=options["note"])
        self.stdout.write(
            self.style.SUCCESS(
                f"{done.count} handoff(s) of {found.name} ({found.tenant.slug}) queued again: "
                f"{done.queued} with an ingestion job, {done.waiting} waiting for their "
                f"reference's; {done.batches} transaction(s); failed before "
                f"{done.failed_before.isoformat()}."
            )
        )

    def bound(self, failed_before: str | None) -> datetime | None:
        if failed_before:
            parsed = parse_datetime(failed_before)
            if parsed is None or parsed.tzinfo is None:
                raise CommandError(
                    f"--failed-before {failed_before!r}: an ISO 8601 date-time with its UTC offset"
                )
            return parsed
        return None
