"""``manage.py outbox``: the outbox console at a terminal (``jobs.outbox``): each
subscriber's lag, and quarantine, release or replay of one delivery."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import clock, outbox
from jobs.errors import IllegalTransition, InvalidArgument
from jobs.management.actors import actor, must_reach
from jobs.management.tables import positive_int, table
from jobs.models import Delivery

ACTIONS = {
    "quarantine": (
        outbox.quarantine,
        "Quarantined",
        "Hold a poison delivery back: its job is cancelled if unfinished and not run again until released.",
    ),
    "release": (outbox.release, "Released", "End a delivery's quarantine: its job is retried from scratch."),
    "replay": (
        outbox.replay,
        "Replayed",
        "Deliver one event again to one subscriber: a delivered, failed or cancelled delivery runs again.",
    ),
}


class Command(BaseCommand):
    help = (
        "The outbox: 'lag' prints each subscriber's undelivered, oldest undelivered, "
        "failing, failed and quarantined deliveries; 'quarantine', 'release' and 'replay' "
        "act on one delivery, recorded in its job's history with --user and --reason."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
        commands.add_parser("lag", help="Each subscriber's lag and failures (every tenant).")
        for name, (_, _, text) in ACTIONS.items():
            action = commands.add_parser(name, help=text)
            action.add_argument("delivery", type=positive_int, metavar="DELIVERY_ID")
            action.add_argument("--reason", required=True, help="Why: kept in the delivery's job history.")
            action.add_argument(
                "--user",
                required=True,
                metavar="USERNAME",
                help="The (existing) user recorded as the one who acted; must hold jobs.operate_delivery.",
            )

    def handle(self, *args: Any, subcommand: str, **options: Any) -> None:
        if subcommand == "lag":
            self.stdout.write(self._lag())
            return
        apply, done, _ = ACTIONS[subcommand]
        delivery = self._delivery(options["delivery"])
        who = actor(options["user"], Delivery)
        must_reach(who, delivery.event.tenant_id, f"delivery {delivery.pk}")
        try:
            changed = apply(delivery, who, options["reason"], via="command")
        except (IllegalTransition, InvalidArgument) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            self.style.SUCCESS(
                f"{done} delivery {changed.pk} ({changed.event} → {changed.subscriber}); its job "
                f"{changed.job_id} is {changed.job.state}."
            )
        )

    def _lag(self) -> str:
        rows = outbox.lag()
        if not rows:
            return "(nothing undelivered, failed or quarantined)"
        now = clock.now()
        return table(
            ["subscriber", "undelivered", "oldest undelivered", "failing", "failed", "quarantined"],
            [
                [
                    lag.subscriber,
                    lag.undelivered,
                    outbox.age(lag.oldest_seconds(now)),
                    lag.failing,
                    lag.failed,
                    lag.quarantined,
                ]
                for lag in rows
            ],
        )

    def _delivery(self, pk: int) -> Delivery:
        try:
            return Delivery.objects.select_related("event", "job").get(pk=pk)
        except Delivery.DoesNotExist:
            raise CommandError(f"no delivery with id {pk}") from None
