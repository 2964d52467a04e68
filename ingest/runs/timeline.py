"""What the operator surfaces show of one run, read the same way for the API, the admin
and the commands: its batches with their hook executions, counts by status, and the
deliveries still working on it (a hook delivery backing off, the next batch's fetch).

A run can have thousands of batches: the surfaces show the newest ``BATCH_LIMIT`` and
say how many came before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Prefetch

import jobs
from ingest.runs.models import BatchStatus, ExecutionStatus, HookExecution, IngestBatch, IngestRun

BATCH_LIMIT = 200
RUN_HOOKS = "ingest.RunHooks"
RUN_INGESTER = "ingest.RunIngester"
# Deliveries whose payload is worth a read: the engine's list leaves payloads in the
# table, so each one read is a query; finished ones that succeeded or were cancelled
# tell the operator nothing the batch does not.
WORTH_SHOWING = ("pending", "running", "failed")
UNFINISHED = ("pending", "running")


@dataclass
class Timeline:
    run: IngestRun
    batches: list[IngestBatch]  # in sequence order, each with ``hook_executions`` prefetched
    earlier: int  # batches before the first one shown
    # The newest hook delivery of each batch that is still working or failed, by batch id.
    hook_deliveries: dict[int, jobs.Job] = field(default_factory=dict)
    # Batches being fetched: (sequence, its delivery), while unfinished.
    fetching: list[tuple[int, jobs.Job]] = field(default_factory=list)
    # The newest job of the run's pipeline that failed: its whole error (a traceback
    # included) is for staff, where the run's reason carries its message only.
    failed: jobs.Job | None = None

    @property
    def truncated(self) -> bool:
        return self.earlier > 0


def load(run: IngestRun, *, limit: int = BATCH_LIMIT, deliveries: bool = True) -> Timeline:
    executions = Prefetch(
        "hook_executions",
        queryset=HookExecution.objects.select_related("hook__template").order_by("position"),
    )
    newest = list(run.batches.order_by("-sequence").prefetch_related(executions)[:limit])
    newest.reverse()
    earlier = newest[0].sequence - 1 if newest else 0
    timeline = Timeline(run, newest, earlier)
    if deliveries:
        _add_deliveries(timeline)
    return timeline


def _event_payload(job: jobs.Job) -> dict[str, Any]:
    payload = job.payload.get("payload") if isinstance(job.payload, dict) else None
    return payload if isinstance(payload, dict) else {}


def _add_deliveries(timeline: Timeline) -> None:
    shown = {batch.pk for batch in timeline.batches}
    for job in jobs.pipeline_jobs(timeline.run.pipeline):
        if job.state == "failed":
            timeline.failed = job  # in the order enqueued: the newest wins
        if job.type == RUN_HOOKS and job.state in WORTH_SHOWING:
            batch = _event_payload(job).get("batch")
            if batch in shown:
                timeline.hook_deliveries[batch] = job  # ids ascend: the newest wins
        elif job.type == RUN_INGESTER and job.state in UNFINISHED:
            sequence = _event_payload(job).get("sequence")
            if isinstance(sequence, int):
                timeline.fetching.append((sequence, job))


def counts(run: IngestRun) -> dict[str, dict[str, int]]:
    """Batches and hook executions of the run by status, every status present."""
    batches = dict(run.batches.order_by().values_list("status").annotate(n=Count("id")))
    executions = dict(
        HookExecution.objects.filter(batch__run=run).order_by().values_list("status").annotate(n=Count("id"))
    )
    return {
        "batches": {status: batches.get(status, 0) for status in BatchStatus.values},
        "hook_executions": {status: executions.get(status, 0) for status in ExecutionStatus.values},
    }
