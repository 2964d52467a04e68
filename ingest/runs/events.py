"""The run pipeline's events, each an outbox event with one delivery per subscriber:

- ``IngestRunStarted``: a run was started (once per run). A fact for audit and observers;
  nothing in the pipeline waits on it.
- ``NextBatchRequested``: fetch batch ``sequence`` of the run. Emitted for batch 1 when the
  run starts and by ``RunIngester`` while the source has more; only ``RunIngester`` listens.
- ``IngesterBatchReady``: a batch is fetched and staged; ``RunHooks`` checks it.
- ``HookBatchCompleted``: a batch passed its hooks; ``PublishBatch`` publishes it.
- ``IngestRunFinished``: a run ended (succeeded, failed or cancelled), with its status;
  ``SettleHandoff`` follows it for a run that ingests a scraped reference.

Every event names the run, goes to the run's tenant and pipeline, and carries ids only:
handlers load the rows through the job's tenant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jobs

if TYPE_CHECKING:
    from ingest.runs.models import IngestBatch, IngestRun

INGEST_RUN_STARTED = "IngestRunStarted"
NEXT_BATCH_REQUESTED = "NextBatchRequested"
INGESTER_BATCH_READY = "IngesterBatchReady"
HOOK_BATCH_COMPLETED = "HookBatchCompleted"
INGEST_RUN_FINISHED = "IngestRunFinished"


def _publish(name: str, run: IngestRun, payload: dict) -> None:
    jobs.publish(
        name,
        {"run": run.pk, **payload},
        tenant=run.tenant_id,
        pipeline=run.pipeline,
        created_by=run.started_by_id,
    )


def publish_run_started(run: IngestRun, *, started_by: str) -> None:
    _publish(INGEST_RUN_STARTED, run, {"source": run.source.name, "started_by": started_by})


def publish_next_batch(run: IngestRun, *, sequence: int) -> None:
    _publish(NEXT_BATCH_REQUESTED, run, {"sequence": sequence})


def publish_batch_ready(batch: IngestBatch) -> None:
    _publish(INGESTER_BATCH_READY, batch.run, {"batch": batch.pk, "sequence": batch.sequence})


def publish_hooks_completed(batch: IngestBatch) -> None:
    _publish(HOOK_BATCH_COMPLETED, batch.run, {"batch": batch.pk, "sequence": batch.sequence})


def publish_run_finished(run: IngestRun) -> None:
    _publish(INGEST_RUN_FINISHED, run, {"status": run.status, "reference": run.reference_id})
