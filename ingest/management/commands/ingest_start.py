"""``manage.py ingest_start``: start an ingest run of a source, and optionally see it
through in this process."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import jobs
from console.cli import actor, must_reach
from ingest.management.commanding import outcome, source_named, tenant_named
from ingest.runs import services
from ingest.runs.models import BatchStatus, IngestRun, RunStatus

# The longest pause between two looks while the run's next job is not due yet.
MAX_PAUSE_SECONDS = 5.0


class Command(BaseCommand):
    help = (
        "Start an ingest run of a source (by name; --tenant when several tenants have "
        "one of that name). With --wait, run its jobs in this process until the run "
        "ends, and exit non-zero unless it succeeded."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", help="The source's name.")
        parser.add_argument("--tenant", metavar="SLUG", help="The source's tenant.")
        parser.add_argument(
            "--wait", action="store_true", help="Run the jobs here (no cluster needed) until the run ends."
        )
        parser.add_argument(
            "--user", metavar="USERNAME", help="Record this (existing) user as the one who started it."
        )

    def handle(
        self, *args: Any, source: str, tenant: str | None, wait: bool, user: str | None, **options: Any
    ) -> None:
        found, who = source_named(source, tenant_named(tenant)), actor(user, IngestRun)
        must_reach(who, found.tenant_id, f"source {found.name!r}")
        try:
            run = services.start_ingest(found, actor=who, via="command")
        except services.RunRefused as exc:
            raise CommandError(f"not started: {exc}") from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Started run {run.pk} of {found.name} ({found.tenant.slug}), pipeline {run.pipeline}"
            )
        )
        if not wait:
            self.stdout.write(f"Follow it: manage.py ingest_status {run.pk}")
            return
        run = self.see_through(run)
        if run.status != RunStatus.SUCCEEDED:
            raise CommandError(outcome(run))
        self.stdout.write(self.style.SUCCESS(outcome(run)))

    def see_through(self, run: IngestRun) -> IngestRun:
        """Run due jobs until the run has ended, reporting each batch as it settles."""
        reported: set[int] = set()
        while True:
            jobs.run_until_idle()
            run.refresh_from_db()
            self.report_batches(run, reported)
            if run.finished:
                return run
            waiting = [job for job in jobs.pipeline_jobs(run.pipeline) if job.state in ("pending", "running")]
            if not waiting:
                raise CommandError(f"run {run.pk} is stalled: nothing of it is queued or running")
            due = min((job.run_after for job in waiting if job.state == "pending"), default=jobs.now())
            time.sleep(min(max((due - jobs.now()).total_seconds(), 0.05), MAX_PAUSE_SECONDS))

    def report_batches(self, run: IngestRun, reported: set[int]) -> None:
        settled = (
            run.batches.filter(status__in=[BatchStatus.PUBLISHED, BatchStatus.HOOKS_FAILED])
            .order_by("sequence")
            .values_list("sequence", "records", "status")
        )
        labels = dict(BatchStatus.choices)
        for sequence, records, status in settled:
            if sequence not in reported:
                reported.add(sequence)
                self.stdout.write(f"  batch {sequence}: {records} record(s), {labels[status]}")
