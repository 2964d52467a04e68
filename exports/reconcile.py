"""The reconciliation: what a crashed worker left behind is recovered here, every few
seconds, in the cluster.

One pass does four things, each row in its own short transaction:

1. A claim with no word from its worker for ``CLAIM_TIMEOUT_SECONDS`` (10 minutes) goes
   back to pending; its worker's later reports are refused (the claim's generation moved
   on), so the job is never exported twice under one claim.
2. A job running longer than the operators' maximum duration is failed: a direct
   export counted from its claim (its worker cancels its query at its next heartbeat,
   which is refused), an UNLOAD from its submission (its query is cancelled here).
3. A submitted job not updated for ``STALE_SUBMITTED_SECONDS`` (30 minutes) is looked up
   on the engine by its query id: finished, it is completed (its rows counted from the
   files' footers); failed, it is failed; still running, it is left to the pollers.
4. A snapshot whose jobs have all finished is made ``ready`` or ``failed``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef

import jobs
from exports import conf, engines, services
from exports.models import (
    JOB_FINISHED,
    EventKind,
    ExportConfig,
    ExportJob,
    JobStatus,
    Snapshot,
    SnapshotStatus,
)
from exports.spec import claim_folder

logger = logging.getLogger(__name__)
WORKER = "reconciliation"


@dataclass
class Pass:
    claims_reset: int = 0
    timed_out: int = 0
    checked: int = 0
    completed: int = 0
    failed: int = 0
    snapshots_finished: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def reconcile(*, engine: Callable[[], Any] = engines.trino_engine) -> Pass:
    """One pass of the reconciliation. ``engine`` builds the Trino engine, the only one
    whose jobs are ever submitted (tests pass one for their fake)."""
    now = jobs.now()
    done = Pass()
    done.claims_reset = reset_stale_claims(now)
    max_duration = ExportConfig.current().max_duration_seconds
    too_old = now - timedelta(seconds=max_duration)
    # A direct export counts from its claim, an UNLOAD from its submission; the worker of
    # a direct one learns of it at its next heartbeat and cancels its query.
    overdue = [
        *_ids(status=JobStatus.CLAIMED, claimed_at__lt=too_old),
        *_ids(status=JobStatus.SUBMITTED, submitted_at__lt=too_old),
    ]
    for job_id in overdue:
        if _time_out(job_id, max_duration, engine):
            done.timed_out += 1
    stale = now - timedelta(seconds=conf.get("STALE_SUBMITTED_SECONDS"))
    for job_id in _ids(status=JobStatus.SUBMITTED, updated_at__lt=stale):
        outcome = _check_with_engine(job_id, engine)
        if outcome:
            done.checked += 1
            done.completed += outcome == JobStatus.COMPLETED
            done.failed += outcome == JobStatus.FAILED
    done.snapshots_finished = finish_snapshots()
    return done


def _ids(**where: Any) -> list[int]:
    return list(ExportJob.objects.filter(**where).order_by("pk").values_list("pk", flat=True)[:500])


def reset_stale_claims(now: datetime) -> int:
    """Hand back claims whose worker has said nothing for the claim timeout."""
    cutoff = now - timedelta(seconds=conf.get("CLAIM_TIMEOUT_SECONDS"))
    reset = 0
    with transaction.atomic():
        stale = list(
            ExportJob.objects.select_for_update(skip_locked=True)
            .filter(status=JobStatus.CLAIMED, updated_at__lt=cutoff)
            .order_by("pk")[:500]
        )
        for job in stale:
            worker, quiet = job.claimed_by, int((now - job.updated_at).total_seconds())
            services.reset(job, now)
            job.save()
            services.event(
                job,
                EventKind.CLAIM_RESET,
                now,
                from_status=JobStatus.CLAIMED,
                to_status=JobStatus.PENDING,
                worker=WORKER,
                message=f"no word from {worker} for {quiet} s",
            ).save()
            reset += 1
    if reset:
        logger.warning("reset %d stale export claim(s)", reset)
    return reset


def _locked(job_id: int, *statuses: str) -> ExportJob | None:
    return (
        ExportJob.objects.select_for_update(skip_locked=True)
        .filter(pk=job_id, status__in=statuses or [JobStatus.SUBMITTED])
        .first()
    )


def _time_out(job_id: int, max_duration: int, engine: Callable[[], Any]) -> bool:
    with transaction.atomic():
        job = _locked(job_id, JobStatus.CLAIMED, JobStatus.SUBMITTED)
        if job is None:
            return False
        submitted = job.status == JobStatus.SUBMITTED
        services.settle(
            job,
            services.Report(
                JobStatus.FAILED,
                job.generation,
                worker=WORKER,
                error_message=f"Export job exceeded maximum duration ({max_duration}s)",
            ),
        )
    if submitted:
        _cancel_query(job, engine)
    return True


def _cancel_query(job: ExportJob, engine: Callable[[], Any]) -> None:
    try:
        engine().cancel(job.query_id, job.starburst_role)
    except Exception as error:  # the job is failed either way; the query may end on its own
        logger.warning("could not cancel query %s of export job %s: %s", job.query_id, job.pk, error)


def _check_with_engine(job_id: int, engine: Callable[[], Any]) -> str | None:
    """Ask the engine about a submitted job nobody updated for a long time."""
    with transaction.atomic():
        job = _locked(job_id)
        if job is None:
            return None
        try:
            state = engine().status(job.query_id, job.starburst_role)
            if state.state == "FINISHED":
                from exports import parquet  # pyarrow: loaded where files are read

                written = parquet.count_rows(
                    claim_folder(job.destination, job.generation), dict(conf.get("STORAGE_OPTIONS"))
                )
                services.settle(
                    job,
                    services.Report(
                        JobStatus.COMPLETED,
                        job.generation,
                        worker=WORKER,
                        row_count=written.rows,
                        size_bytes=written.size,
                        files=tuple(written.files),
                        note=f"the engine says query {job.query_id} finished",
                        note_kind=EventKind.RECONCILED,
                    ),
                )
                return JobStatus.COMPLETED
            if state.state == "FAILED":
                services.settle(
                    job,
                    services.Report(
                        JobStatus.FAILED,
                        job.generation,
                        worker=WORKER,
                        error_message=state.error or f"query {job.query_id} failed",
                        note=f"the engine says query {job.query_id} failed",
                        note_kind=EventKind.RECONCILED,
                    ),
                )
                return JobStatus.FAILED
            message = f"the engine says query {job.query_id} is {state.state}"
        except Exception as error:
            message = f"could not ask the engine about query {job.query_id}: {error}"
            logger.warning("export job %s: %s", job.pk, message)
        # Asked again only after another quiet spell, not on every pass.
        job.updated_at = jobs.now()
        job.save(update_fields=["updated_at"])
        services.event(job, EventKind.RECONCILED, job.updated_at, worker=WORKER, message=message).save()
        return "checked"


def finish_snapshots() -> int:
    """Finish every open snapshot none of whose jobs is left to run."""
    unfinished = ExportJob.objects.filter(snapshot=OuterRef("pk")).exclude(status__in=JOB_FINISHED)
    ids = (
        Snapshot.objects.filter(status__in=[SnapshotStatus.PENDING, SnapshotStatus.CREATING])
        .filter(~Exists(unfinished), Exists(ExportJob.objects.filter(snapshot=OuterRef("pk"))))
        .values_list("pk", flat=True)[:500]
    )
    return sum(1 for pk in list(ids) if services.finish_snapshot(pk))
