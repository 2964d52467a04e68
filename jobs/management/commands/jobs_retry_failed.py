"""``manage.py jobs_retry_failed``: run failed jobs again, by type or by id."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from jobs import engine, registry
from jobs.errors import IllegalTransition
from jobs.management.actors import actor as operating_user
from jobs.management.actors import within_reach
from jobs.management.tables import positive_int, since
from jobs.models import Job

RETRYABLE = (Job.State.FAILED, Job.State.CANCELLED)


class Command(BaseCommand):
    help = (
        "Retry failed jobs from scratch (attempts reset), chosen by --type and/or --id, "
        "optionally only those that finished --since a time. Each retry is recorded in "
        "the job's history, with --user as the staff member who asked (who must hold "
        "jobs.operate_job)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--type",
            dest="type_name",
            metavar="NAME",
            help="Retry the failed jobs of this registered job type.",
        )
        parser.add_argument(
            "--id",
            dest="ids",
            metavar="N",
            type=positive_int,
            nargs="+",
            help="Retry these jobs (failed or cancelled).",
        )
        parser.add_argument(
            "--since",
            type=since,
            metavar="WHEN",
            help="Only jobs that finished since then: 30m, 2h, 7d or an ISO datetime.",
        )
        parser.add_argument(
            "--user",
            metavar="USERNAME",
            help="Record this (existing) user as the one who retried; they must hold jobs.operate_job.",
        )
        parser.add_argument("--reason", default="", help="A note for the job's history.")
        parser.add_argument("--limit", type=positive_int, help="Retry at most this many jobs, oldest first.")
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be retried; change nothing."
        )

    def handle(
        self,
        *args: Any,
        type_name: str | None,
        ids: list[int] | None,
        since: datetime | None,
        user: str | None,
        reason: str,
        limit: int | None,
        dry_run: bool,
        **options: Any,
    ) -> None:
        if not type_name and not ids:
            raise CommandError("say which jobs to retry: --type NAME and/or --id N [N ...]")
        if type_name and registry.get(type_name) is None:
            raise CommandError(
                f"unknown job type {type_name!r}; registered types: {', '.join(registry.names()) or '(none)'}"
            )
        actor = operating_user(user, Job)
        jobs = self._select(within_reach(Job.objects.all(), actor), type_name, ids, since)
        chosen = list(jobs[:limit] if limit else jobs)
        if not chosen:
            self.stdout.write("No failed job matches.")
            return
        if dry_run:
            self.stdout.write(f"Would retry {len(chosen)} job(s): {_ids(chosen)}")
            return
        retried, skipped = self._retry(chosen, actor, reason)
        for job, error in skipped:
            self.stderr.write(f"job {job.pk} skipped: {error}")
        self.stdout.write(self.style.SUCCESS(f"Retried {len(retried)} job(s): {_ids(retried)}"))

    def _select(
        self, reach: QuerySet[Job], type_name: str | None, ids: list[int] | None, since: datetime | None
    ) -> Any:
        """The jobs asked for, among those the actor may act on (a tenant's staff: their
        tenant's)."""
        jobs = reach.order_by("id")
        if ids:
            self._check_ids(reach, ids)
            jobs = jobs.filter(pk__in=ids, state__in=RETRYABLE)
        else:
            jobs = jobs.filter(state=Job.State.FAILED)
        if type_name:
            jobs = jobs.filter(type=type_name)
        if since:
            jobs = jobs.filter(finished_at__gte=since)
        return jobs

    def _check_ids(self, reach: QuerySet[Job], ids: list[int]) -> None:
        """Named jobs must exist (for the actor) and be retryable: a typo must not pass
        silently, nor another tenant's job be told from one that does not exist."""
        states = dict(reach.filter(pk__in=ids).values_list("pk", "state"))
        missing = [pk for pk in ids if pk not in states]
        if missing:
            raise CommandError(f"no job with id {', '.join(map(str, missing))}")
        busy = [f"{pk} ({state})" for pk, state in states.items() if state not in RETRYABLE]
        if busy:
            raise CommandError(f"only failed or cancelled jobs can be retried; not {', '.join(busy)}")

    def _retry(self, jobs: list[Job], actor: Any, reason: str) -> tuple[list[Job], list[tuple[Job, str]]]:
        retried: list[Job] = []
        skipped: list[tuple[Job, str]] = []
        for job in jobs:
            try:
                retried.append(engine.retry(job, actor=actor, reason=reason, via="command"))
            except IllegalTransition as error:  # someone else retried it meanwhile
                skipped.append((job, str(error)))
        return retried, skipped


def _ids(jobs: list[Job]) -> str:
    shown = ", ".join(str(job.pk) for job in jobs[:50])
    return shown + (f" … and {len(jobs) - 50} more" if len(jobs) > 50 else "")
