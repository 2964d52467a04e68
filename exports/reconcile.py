"""The reconciliation: what only the exports app can know, in one pass a minute that then
ends (``exports.Reconcile``). Claims, leases, heartbeats and rescues are the engine's.

One pass does four things, each row in its own short transaction:

1. It keeps the rows in step with what the engine did where no hook could follow: an
   export whose engine job failed or was cancelled fails; a claimed one whose engine
   job no longer runs (the reaper took its lease back) is pending again; an open one
   with no engine job (made before exports ran on the engine) is given one.
2. A submitted UNLOAD running longer than the operators' maximum duration, counted from
   its submission, fails: its engine job is cancelled and its query cancelled on Trino.
   (A running export's own attempt has that time limit in the engine.)
3. A submitted UNLOAD not polled for ``STALE_SUBMITTED_SECONDS`` (no export worker has
   run for that long) is looked up on Trino by its query id: finished, it is completed
   (its rows counted from the files' footers); failed, it fails; its engine job then
   ends, cancelled with the reason. Still running, it is left to the next poll.
4. A snapshot whose jobs have all finished is made ``ready`` (its folder sealed) or
   ``failed``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from itertools import groupby
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
OPEN = [JobStatus.PENDING, JobStatus.CLAIMED, JobStatus.SUBMITTED]
# Rows one pass looks at, per kind of finding.
BATCH = 500
# The engine's job states the rows follow (its Job.State; a pipeline reads no engine
# module): ended without success, and waiting to run.
ENGINE_ENDED = ["failed", "cancelled"]
ENGINE_PENDING = "pending"


@dataclass
class Pass:
    failed_with_engine: int = 0
    claims_reset: int = 0
    linked: int = 0
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
    follow_engine(done)
    max_duration = ExportConfig.current().max_duration_seconds
    too_old = now - timedelta(seconds=max_duration)
    for job_id in _ids(status=JobStatus.SUBMITTED, submitted_at__lt=too_old):
        done.timed_out += _time_out(job_id, max_duration, engine)
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
    return list(ExportJob.objects.filter(**where).order_by("pk").values_list("pk", flat=True)[:BATCH])


def _locked(job_id: int, *statuses: str) -> ExportJob | None:
    return (
        # ``of``: the row alone; PostgreSQL locks no nullable side of an outer join.
        ExportJob.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(pk=job_id, status__in=statuses or [JobStatus.SUBMITTED])
        .select_related("job")
        .first()
    )


def follow_engine(done: Pass) -> None:
    """Rows whose engine job ended, lost its claim, or never was."""
    for row_id in _ids(status__in=OPEN, job__state__in=ENGINE_ENDED):
        with transaction.atomic():
            row = _locked(row_id, *OPEN)
            if row is None or row.job is None or row.job.state not in ENGINE_ENDED:
                continue
            before, error = row.status, row.job.last_error
            if row.job.state == "cancelled":
                error = f"its engine job was cancelled: {error or 'no reason given'}"
            services.settle(
                row,
                services.Report(
                    JobStatus.FAILED, worker=WORKER, error_message=error or "its engine job failed"
                ),
            )
            if before == JobStatus.SUBMITTED:
                jobs.enqueue("exports.CancelQuery", {"job": row.pk}, tenant=row.tenant_id)
            done.failed_with_engine += 1
    for row_id in _ids(status=JobStatus.CLAIMED, job__state=ENGINE_PENDING):
        with transaction.atomic():
            row = _locked(row_id, JobStatus.CLAIMED)
            if row is None or row.job is None or row.job.state != ENGINE_PENDING:
                continue
            services.hand_back(
                row,
                EventKind.CLAIM_RESET,
                worker=WORKER,
                message=f"the engine took the claim of {row.claimed_by} back: "
                f"{row.job.last_error or 'recovered'}",
            )
            done.claims_reset += 1
    unlinked = list(
        ExportJob.objects.filter(status__in=OPEN, job__isnull=True).order_by("snapshot_id", "position")[
            :BATCH
        ]
    )
    for _, rows in groupby(unlinked, key=lambda row: row.snapshot_id):
        with transaction.atomic():
            mine = list(
                ExportJob.objects.select_for_update(skip_locked=True)
                .filter(pk__in=[row.pk for row in rows], job__isnull=True)
                .order_by("position")
            )
            services.link_engine_jobs(mine)
            done.linked += len(mine)


def _end_engine_job(row: ExportJob, reason: str) -> None:
    """The row is settled here, not by a worker: its engine job has nothing left to do.
    Called once the row's transaction committed: the engine takes the job's row before
    the export's (its hook runs, and finds the export finished), and two orders would
    deadlock."""
    if row.job is None:
        return
    try:
        jobs.cancel(row.job, reason=reason, via="reconciliation")
    except jobs.IllegalTransition:
        pass  # it ended meanwhile


def _time_out(job_id: int, max_duration: int, engine: Callable[[], Any]) -> bool:
    with transaction.atomic():
        row = _locked(job_id)
        if row is None:
            return False
        message = f"Export job exceeded maximum duration ({max_duration}s)"
        services.settle(row, services.Report(JobStatus.FAILED, worker=WORKER, error_message=message))
    _end_engine_job(row, message)
    _cancel_query(row, engine)
    return True


def _cancel_query(job: ExportJob, engine: Callable[[], Any]) -> None:
    try:
        engine().cancel(job.query_id, job.starburst_role)
    except Exception as error:  # the job is failed either way; the query may end on its own
        logger.warning("could not cancel query %s of export job %s: %s", job.query_id, job.pk, error)


def _check_with_engine(job_id: int, engine: Callable[[], Any]) -> str | None:
    """Ask the engine about a submitted job nobody polled for a long time."""
    settled = None
    with transaction.atomic():
        row = _locked(job_id)
        if row is None:
            return None
        try:
            state = engine().status(row.query_id, row.starburst_role)
            if state.state in ("FINISHED", "FAILED"):
                settled = _settle_from_engine(row, state)
            else:
                message = f"the engine says query {row.query_id} is {state.state}"
        except Exception as error:
            message = f"could not ask the engine about query {row.query_id}: {error}"
            logger.warning("export job %s: %s", row.pk, message)
        if settled is None:
            # Asked again only after another quiet spell, not on every pass.
            row.updated_at = jobs.now()
            row.save(update_fields=["updated_at"])
            services.event(row, EventKind.RECONCILED, row.updated_at, worker=WORKER, message=message).save()
    if settled is None:
        return "checked"
    _end_engine_job(row, f"settled by the reconciliation: {settled.note}")
    return settled.status


def _settle_from_engine(row: ExportJob, state: Any) -> services.Report:
    if state.state == "FINISHED":
        from exports import parquet  # pyarrow: loaded where files are read

        written = parquet.count_rows(
            claim_folder(row.destination, row.generation), dict(conf.get("STORAGE_OPTIONS"))
        )
        update = services.Report(
            JobStatus.COMPLETED,
            worker=WORKER,
            row_count=written.rows,
            size_bytes=written.size,
            files=tuple(written.files),
            note=f"the engine says query {row.query_id} finished",
            note_kind=EventKind.RECONCILED,
        )
    else:
        update = services.Report(
            JobStatus.FAILED,
            worker=WORKER,
            error_message=state.error or f"query {row.query_id} failed",
            note=f"the engine says query {row.query_id} failed",
            note_kind=EventKind.RECONCILED,
        )
    services.settle(row, update)
    return update


def finish_snapshots() -> int:
    """Finish every open snapshot none of whose jobs is left to run."""
    unfinished = ExportJob.objects.filter(snapshot=OuterRef("pk")).exclude(status__in=JOB_FINISHED)
    ids = (
        Snapshot.objects.filter(status__in=[SnapshotStatus.PENDING, SnapshotStatus.CREATING])
        .filter(~Exists(unfinished), Exists(ExportJob.objects.filter(snapshot=OuterRef("pk"))))
        .values_list("pk", flat=True)[:BATCH]
    )
    return sum(1 for pk in list(ids) if services.finish_snapshot(pk))
