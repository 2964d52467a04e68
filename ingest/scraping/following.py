"""Following a handoff's ingestion: its job starts the reference's ingest run, the run's
end settles it, the next waiting payload goes, an operator retries a failed one, and
sweeps catch what fell through."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import transaction

import jobs
from ingest.runs.models import IngestRun, IngestSource, RunStatus
from ingest.scraping import history, queueing
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff, ScrapeReference

SWEEP_LIMIT = 1000
# How long a handoff waits without a job before the sweep looks at it: a sync's own
# handoff is queued in the sync's transaction.
WAITING_GRACE = timedelta(minutes=1)


class HandoffRefused(Exception):
    """An operator action a handoff does not allow now; the message says why."""


def start_ingestion(handoff_id: int, *, tenant: int | None, job_id: int, pipeline: Any) -> str:
    """The job ``job_id`` of a queued handoff starts the reference's ingest run (in the
    job's ``pipeline``) and the handoff runs. What it did, in words; a handoff that moved
    on meanwhile (retried, superseded) is left alone."""
    from ingest.runs import services as runs

    handoff = (
        IngestionHandoff.objects.select_related("source", "created_by")
        .filter(pk=handoff_id, tenant_id=tenant)
        .first()
    )
    if handoff is None:
        raise HandoffRefused(f"handoff {handoff_id} is not one of this job's tenant's")
    reference = ScrapeReference.objects.select_for_update().get(pk=handoff.reference_id)
    handoff = IngestionHandoff.objects.select_for_update().get(pk=handoff.pk)
    if handoff.status != HandoffStatus.QUEUED or handoff.job_id != job_id:
        return f"handoff {handoff.pk} is {handoff.status}, no longer this job's"
    try:
        run = runs.start_ingest(
            handoff.source, actor=handoff.created_by, via="scrape", reference=reference, pipeline=pipeline
        )
    except runs.RunRefused as exc:
        history.move(
            [handoff.pk],
            HandoffStatus.FAILED,
            HandoffReason.QUEUE_REFUSED,
            message=str(exc),
            last_error=str(exc)[:4000],
        )
        return f"handoff {handoff.pk} failed: {exc}"
    history.move(
        [handoff.pk],
        HandoffStatus.RUNNING,
        HandoffReason.INGESTION_STARTED,
        message=f"ingest run {run.pk}",
        ingest_run=run,
    )
    return f"handoff {handoff.pk}: ingest run {run.pk} started"


OUTCOMES = {
    RunStatus.SUCCEEDED: (HandoffStatus.COMPLETED, HandoffReason.INGESTION_COMPLETED),
    RunStatus.FAILED: (HandoffStatus.FAILED, HandoffReason.INGESTION_FAILED),
    RunStatus.CANCELLED: (HandoffStatus.FAILED, HandoffReason.INGESTION_CANCELLED),
}


def settle_for_run(run: IngestRun) -> str:
    """A reference's ingest run ended: its handoff takes the run's outcome, and the
    newest payload that waited for it is queued (older waiting ones are superseded)."""
    if run.reference_id is None or run.status not in OUTCOMES:
        return "not a finished run of a reference"
    ScrapeReference.objects.select_for_update().get(pk=run.reference_id)
    status, reason = OUTCOMES[RunStatus(run.status)]
    settled = list(
        IngestionHandoff.objects.filter(ingest_run=run)
        .exclude(status=status, reason_code=reason)
        .values_list("pk", flat=True)
    )
    if settled:
        error = run.failure_reason[:4000] if status == HandoffStatus.FAILED else ""
        history.move(
            settled,
            status,
            reason,
            last_error=error,
            message=run.failure_reason or f"ingest run {run.pk} {run.status}",
        )
    return f"{len(settled)} handoff(s) settled; " + queue_next(run.reference_id)


def queue_next(reference_id: int, *, actor: Any = None) -> str:
    """Queue the newest handoff waiting for ``reference_id``'s ingestion, if none is
    active any more; older waiting ones, and any of a payload the reference no longer
    has, are superseded. The caller holds the reference."""
    if queueing.active_references([reference_id]):
        return "the reference's ingestion is still active"
    current = ScrapeReference.objects.values_list("payload_hash", flat=True).get(pk=reference_id)
    waiting = list(
        IngestionHandoff.objects.filter(
            reference_id=reference_id, status=HandoffStatus.QUEUED, job_id__isnull=True
        )
        .order_by("-id")
        .values_list("pk", "source_id", "payload_hash")
    )
    if not waiting:
        return "nothing waits"
    newest = next((row for row in waiting if row[2] == current), None)
    older = [pk for pk, _, _ in waiting if newest is None or pk != newest[0]]
    if older:
        history.move(
            older,
            HandoffStatus.FAILED,
            HandoffReason.SUPERSEDED,
            message=f"handoff {newest[0]} brought a newer payload"
            if newest is not None
            else "the reference has a newer payload",
        )
    if newest is None:
        return f"{len(older)} superseded"
    queueing.queue(IngestSource.objects.get(pk=newest[1]), [(newest[0], reference_id)], actor=actor)
    return f"handoff {newest[0]} queued"


def queue_waiting(*, settled_for: timedelta = WAITING_GRACE) -> int:
    """The safety net for handoffs queued without a job (a payload waiting for its
    reference's ingestion, or one the migration handed off): those last changed more than
    ``settled_for`` ago whose reference has no ingestion in progress any more are queued,
    a bounded number a sweep. How many references it queued one for."""
    references = list(
        IngestionHandoff.objects.filter(
            status=HandoffStatus.QUEUED,
            job_id__isnull=True,
            updated_at__lt=history.database_now() - settled_for,
        )
        .order_by("reference_id")
        .values_list("reference_id", flat=True)
        .distinct()[:SWEEP_LIMIT]
    )
    busy = queueing.active_references(references)
    queued = 0
    for reference_id in references:
        if reference_id in busy:
            continue
        with transaction.atomic():
            ScrapeReference.objects.select_for_update().get(pk=reference_id)
            queued += queue_next(reference_id).endswith("queued")
    return queued


@transaction.atomic
def retry_handoffs(handoffs: Iterable[IngestionHandoff], *, actor: Any = None, via: str = "admin") -> int:
    """Queue failed handoffs again (an operator's action, recorded with the actor). Only
    the reference's latest payload is retried: a failed handoff whose reference has moved
    on to another payload is refused. How many were queued or set waiting."""
    retried = 0
    for handoff in handoffs:
        reference = ScrapeReference.objects.select_for_update().get(pk=handoff.reference_id)
        current = IngestionHandoff.objects.select_for_update().get(pk=handoff.pk)
        if current.status != HandoffStatus.FAILED:
            raise HandoffRefused(f"handoff {current.pk} is {current.status}, not failed")
        if current.payload_hash != reference.payload_hash:
            raise HandoffRefused(
                f"handoff {current.pk} is of an older payload of reference "
                f"{reference.external_id!r}; only its latest is ingested"
            )
        history.move(
            [current.pk],
            HandoffStatus.QUEUED,
            HandoffReason.RETRIED_BY_OPERATOR,
            message="retried",
            actor=actor,
            via=via,
            attempts=0,
            last_error="",
            job_id=None,
            ingest_run=None,
        )
        queueing.queue(current.source, [(current.pk, reference.pk)], actor=actor, via=via)
        retried += 1
    return retried


def settle_stuck_handoffs() -> int:
    """The safety net: a handoff queued behind a job whose whole pipeline ended without
    starting the run (the job failed or was cancelled) fails, and the next payload of its
    reference is queued; a running handoff whose run ended takes the run's outcome. How
    many were settled."""
    settled = 0
    # The longest-queued first, a bounded number a sweep: a backlog of queued jobs is
    # not stuck, and the next sweep goes on from here.
    queued = {
        job_id: pk
        for job_id, pk in IngestionHandoff.objects.filter(status=HandoffStatus.QUEUED, job_id__isnull=False)
        .order_by("updated_at", "id")
        .values_list("job_id", "pk")[:SWEEP_LIMIT]
        if job_id is not None  # all of them: the filter says so
    }
    for job_id in jobs.pipelines_over(list(queued), before=jobs.now()):
        with transaction.atomic():
            handoff = IngestionHandoff.objects.get(pk=queued[job_id])
            ScrapeReference.objects.select_for_update().get(pk=handoff.reference_id)
            still_stuck = IngestionHandoff.objects.filter(
                pk=handoff.pk, status=HandoffStatus.QUEUED, job_id=job_id
            ).exists()
            if still_stuck:
                why = f"its ingestion job {job_id} ended without starting the run"
                history.move(
                    [handoff.pk],
                    HandoffStatus.FAILED,
                    HandoffReason.INGESTION_FAILED,
                    message=why,
                    last_error=why,
                )
                queue_next(handoff.reference_id)
                settled += 1
    for run in (
        IngestRun.objects.filter(handoffs__status=HandoffStatus.RUNNING)
        .exclude(status=RunStatus.RUNNING)
        .distinct()
    ):
        with transaction.atomic():
            settle_for_run(run)
            settled += 1
    return settled
