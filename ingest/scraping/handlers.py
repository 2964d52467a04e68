"""The jobs of a handoff's ingestion:

ingest.IngestReference  (queued by a sync, one per handoff: starts the reference's run)
IngestRunFinished → ingest.SettleHandoff  (the run's outcome becomes the handoff's)
"""

from __future__ import annotations

from typing import Any

import jobs
from ingest.runs import events
from ingest.runs.models import IngestRun
from ingest.scraping import services


@jobs.handler(
    services.INGEST_REFERENCE, max_attempts=5, backoff=jobs.Exponential(base=10, cap=300, jitter=0.1)
)
def ingest_reference(ctx: jobs.JobContext) -> dict[str, Any]:
    handoff = ctx.payload.get("handoff")
    if not isinstance(handoff, int):
        raise jobs.PermanentError("the job names no handoff")
    try:
        done = services.start_ingestion(
            handoff, tenant=ctx.tenant_id, job_id=ctx.job.pk, pipeline=ctx.job.pipeline_id
        )
    except services.HandoffRefused as exc:
        raise jobs.PermanentError(str(exc)) from exc
    return {"handoff": handoff, "done": done}


@jobs.handler(
    "ingest.SettleHandoff",
    subscribes=[events.INGEST_RUN_FINISHED],
    max_attempts=8,
    backoff=jobs.Exponential(base=10, cap=300, jitter=0.1),
)
def settle_handoff(ctx: jobs.JobContext) -> dict[str, Any]:
    event = ctx.payload.get("payload")
    run_id = event.get("run") if isinstance(event, dict) else None
    run = None
    if isinstance(run_id, int) and ctx.tenant_id is not None:
        run = IngestRun.objects.filter(pk=run_id, tenant_id=ctx.tenant_id).first()
    if run is None:
        raise jobs.PermanentError(f"run {run_id!r} is not one of this job's tenant's")
    if run.reference_id is None or not services.handoffs_available():
        return {"run": run.pk, "skipped": "no handoff follows this run"}
    return {"run": run.pk, "done": services.settle_for_run(run)}
