"""``manage.py ingest_status``: recent ingest runs, or one run with its batches and hook
executions."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.cli import table
from ingest.management.commanding import outcome, runs_of, tenant_named, when
from ingest.runs import timeline
from ingest.runs.models import IngestRun


def indented(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A table under the batch it belongs to."""
    return textwrap.indent(table(headers, rows), "    ")


class Command(BaseCommand):
    help = (
        "Without RUN_ID: a table of the most recent runs (of one tenant with --tenant). "
        "With RUN_ID: that run, its batches and each hook execution."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", nargs="?", type=int, metavar="RUN_ID")
        parser.add_argument("--tenant", metavar="SLUG", help="Only this tenant's runs.")
        parser.add_argument(
            "--limit", type=int, default=20, help="How many recent runs, or batches of one run (default 20)."
        )

    def handle(self, *args: Any, run: int | None, tenant: str | None, limit: int, **options: Any) -> None:
        if limit < 1:
            raise CommandError("--limit must be at least 1")
        runs = runs_of(tenant_named(tenant))
        if run is None:
            self.stdout.write(self.recent(list(runs[:limit])))
            return
        found = runs.filter(pk=run).first()
        if found is None:
            of = f" of tenant {tenant!r}" if tenant else ""
            raise CommandError(f"no run {run}{of}")
        self.stdout.write(self.one(found, limit))

    def recent(self, runs: list[IngestRun]) -> str:
        if not runs:
            return "(no runs)"
        return table(
            [
                "run",
                "tenant",
                "source",
                "status",
                "batches",
                "records",
                "hook failures",
                "started",
                "finished",
                "by",
            ],
            [
                [
                    run.pk,
                    run.tenant.slug,
                    run.source.name,
                    run.status,
                    f"{run.batches_published}/{run.batches_ingested}",
                    run.records_published,
                    run.hook_failures,
                    when(run.started_at),
                    when(run.finished_at),
                    run.started_by.get_username() if run.started_by else "—",
                ]
                for run in runs
            ],
        )

    def one(self, run: IngestRun, limit: int) -> str:
        shown = timeline.load(run, limit=limit, deliveries=False)
        lines = [
            outcome(run),
            f"pipeline {run.pipeline}, started {when(run.started_at)}, finished {when(run.finished_at)}",
            "",
        ]
        if shown.earlier:
            lines.append(f"({shown.earlier} earlier batch(es) not shown; --limit shows more)")
        if not shown.batches:
            lines.append("(no batch fetched yet)")
        for batch in shown.batches:
            lines.append(
                f"batch {batch.sequence}: {batch.get_status_display()}, "
                f"{batch.records} record(s); fetched {when(batch.fetched_at)}, hooks "
                f"finished {when(batch.checked_at)}, published {when(batch.published_at)}"
            )
            executions = list(batch.hook_executions.all())
            if executions:
                lines.append(
                    indented(
                        ["hook", "status", "tries", "pod phase", "exit code", "job name", "reason"],
                        [
                            [
                                e.hook_name,
                                e.status,
                                e.tries,
                                e.pod_phase or "—",
                                "—" if e.exit_code is None else e.exit_code,
                                e.runner_ref or "—",
                                (e.reason or "—").splitlines()[0][:100],
                            ]
                            for e in executions
                        ],
                    )
                )
        lines += ["", "actions:"]
        lines += [
            f"  {when(action.at)}  {action.get_kind_display()}"
            f"{' by ' + action.actor.get_username() if action.actor else ''}"
            f" via {action.via or '—'}{': ' + action.message if action.message else ''}"
            for action in run.actions.select_related("actor")
        ]
        return "\n".join(lines)
