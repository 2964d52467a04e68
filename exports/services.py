"""The export jobs' state machine: every change a worker, the reconciliation, the API or
an operator makes goes through here, each in one transaction with its history.

Snapshots are made from mappings (``create_snapshot``); an entity that is a Trino query
must be one query (``exports.entity_sql``) in a catalog of the tenant's ``TrinoBinding``,
whose role its jobs run under. Workers ``claim`` pending jobs, ``report`` what became of
them, and take submitted jobs that are due for a poll (``due_for_poll``). A report names
the claim (``generation``) it comes from and carries the secret token issued with the
claim or the poll: a worker whose claim was reset and given to another, or one that was
never given it, cannot write over it (``ClaimLost``), and so cannot submit a second
query for one job. The files a report lists must lie in the job's folder. A job's
last report finishes its snapshot when no job of it is left, in the same transaction;
the reconciliation catches what a crash left between the two.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

import jobs
from exports import conf, datasets, entity_sql
from exports.models import (
    JOB_FINISHED,
    Engine,
    EntityKind,
    EventKind,
    ExportEvent,
    ExportJob,
    JobStatus,
    Mapping,
    MappingEntity,
    Snapshot,
    SnapshotStatus,
    TrinoBinding,
)
from exports.spec import relative_inside, snapshot_folder

logger = logging.getLogger(__name__)

# How long a submitted job waits for its next poll: 2, 3, 5 … 89 s, then every 90 s.
POLL_SCHEDULE = jobs.Fibonacci()


class InvalidMapping(ValueError):
    """A mapping a snapshot cannot be made from; the message names the entity and why."""


class ClaimLost(Exception):
    """A worker's report on a job it no longer holds (reset, taken by another worker,
    finished or cancelled meanwhile)."""

    def __init__(self, job: ExportJob, expected: str, reason: str = "") -> None:
        self.job = job
        super().__init__(
            f"export job {job.pk} is {job.status} under claim {job.generation}; "
            f"the report was for {expected}" + (f": {reason}" if reason else "")
        )


class InvalidReport(ValueError):
    """A report that is not a transition of the state machine, or lacks what it needs;
    ``field`` names the part of the report at fault."""

    def __init__(self, message: str, field: str = "status") -> None:
        super().__init__(message)
        self.field = field


# The longest wait between a direct export's heartbeats: an operator's cancel or the
# maximum duration reaches the export at its next one.
MAX_HEARTBEAT_SECONDS = 5.0
# The shortest claim timeout that leaves a worker room for two lost heartbeats.
MIN_CLAIM_TIMEOUT_SECONDS = 15


def heartbeat_seconds() -> float:
    """How often a worker exporting a claimed job says it still holds it: a third of the
    claim timeout (two beats may be lost before the claim is taken back), at most
    ``MAX_HEARTBEAT_SECONDS``. Told to the worker with each claim."""
    return min(conf.get("CLAIM_TIMEOUT_SECONDS") / 3, MAX_HEARTBEAT_SECONDS)


def poll_delay(polls_done: int) -> timedelta:
    """The wait before the next poll of a job polled ``polls_done`` times since submission."""
    return POLL_SCHEDULE.delay(polls_done + 1)


def event(
    job: ExportJob,
    kind: str,
    now: datetime,
    *,
    from_status: str = "",
    to_status: str = "",
    worker: str = "",
    actor: Any = None,
    via: str = "",
    message: str = "",
) -> ExportEvent:
    """A line of the job's history (unsaved); ``via``, an operator's door (admin, api)."""
    return ExportEvent(
        job_id=job.pk,
        at=now,
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        generation=job.generation,
        worker=worker[:200],
        actor=actor,
        via=via,
        message=message,
    )


# -- making snapshots ---------------------------------------------------------------


def binding_of(tenant_id: int) -> TrinoBinding | None:
    return TrinoBinding.objects.filter(tenant_id=tenant_id).first()


def check_query_entity(sql: str, catalog: str, binding: TrinoBinding | None) -> list[tuple[str, str]]:
    """What is wrong with a Trino entity of a tenant whose binding is ``binding``: pairs
    of the field at fault (``sql`` or ``catalog``) and why; empty when nothing is. The
    admin's form and ``create_snapshot`` both ask."""
    problems: list[tuple[str, str]] = []
    try:
        tree = entity_sql.parse_query(sql)
    except entity_sql.UnsafeQuery as error:
        problems.append(("sql", str(error)))
        tree = None
    if binding is None:
        problems.append(
            (
                "catalog",
                "the tenant has no Trino binding: a platform operator binds "
                "its role and catalogs before it exports Trino queries",
            )
        )
        return problems
    allowed = ", ".join(binding.catalogs) or "none"
    if not catalog:
        problems.append(("catalog", f"a Trino query names its catalog (allowed: {allowed})"))
    elif not binding.allows(catalog):
        problems.append(
            ("catalog", f"catalog {catalog!r} is not one the tenant's binding allows ({allowed})")
        )
    named = sorted(entity_sql.catalogs_named(tree) - set(binding.catalogs)) if tree else []
    if named:
        problems.append(
            (
                "sql",
                f"the query reads catalog {named[0]!r}, which the tenant's "
                f"binding does not allow ({allowed})",
            )
        )
    return problems


def _job_for(entity: MappingEntity, tenant_id: int, binding: TrinoBinding | None) -> dict[str, Any]:
    """The engine, SQL, role and column types of one entity's job."""
    label = f"{entity.kind} {entity.name}"
    names = entity.columns
    if not isinstance(names, list) or not names or not all(isinstance(name, str) and name for name in names):
        raise InvalidMapping(f"{label}: columns must be a non-empty list of names")
    if len(set(names)) != len(names):
        raise InvalidMapping(f"{label}: a column is listed twice")
    if entity.dataset:
        dataset = datasets.DATASETS.get(entity.dataset)
        if dataset is None:
            raise InvalidMapping(
                f"{label}: no dataset {entity.dataset!r} (there are {', '.join(sorted(datasets.DATASETS))})"
            )
        try:
            sql = dataset.sql(tenant_id, names)
        except ValueError as error:
            raise InvalidMapping(f"{label}: {error}") from None
        return {
            "engine": Engine.POSTGRES,
            "sql": sql,
            "column_types": dataset.types(names),
            "starburst_role": "",
        }
    if not conf.get("TRINO_URL"):
        raise InvalidMapping(f"{label}: is a query, and no Trino is configured (EXPORTS_TRINO_URL)")
    problems = check_query_entity(entity.sql, entity.catalog, binding)
    if problems:
        raise InvalidMapping(f"{label}: {problems[0][1]}")
    assert binding is not None  # a problem otherwise
    return {
        "engine": Engine.TRINO,
        "sql": entity_sql.entity_select(entity.sql, names),
        "column_types": [],
        "starburst_role": binding.role,
    }


def _destination(snapshot: Snapshot, entity: MappingEntity) -> str:
    return (
        f"{snapshot_folder(conf.storage_url(), snapshot.tenant_id, snapshot.pk)}/{entity.kind}s/{entity.name}"
    )


def folder_of_snapshot(job: ExportJob) -> str:
    """The snapshot folder a job's destination (``…/snapshot-N/nodes/<name>``) lies in."""
    return job.destination.rstrip("/").rsplit("/", 2)[0]


def shown_files(job: ExportJob) -> list[str]:
    """A job's files as its tenant's users see them: relative to the snapshot's folder,
    so that no server path or bucket reaches them."""
    home = folder_of_snapshot(job)
    # One entry per file, in order (the admin's download links go by position); a path
    # the report check would have refused shows as nothing.
    return [
        (relative_inside(location, home) or "") if isinstance(location, str) else "" for location in job.files
    ]


def create_snapshot(mapping: Mapping, *, user: Any = None, via: str = "") -> Snapshot:
    """A new snapshot of ``mapping`` and one pending export job per entity, nodes first.

    A Trino query's job runs under the role of the tenant's binding, in a catalog the
    binding allows; the binding is read now, so that later jobs of the snapshot cannot
    run under another.
    """
    entities = sorted(mapping.entities.all(), key=lambda e: (e.kind != EntityKind.NODE, e.position, e.pk))
    if not entities:
        raise InvalidMapping(f"mapping {mapping.name} has no entities")
    binding = binding_of(mapping.tenant_id)
    specs = [(entity, _job_for(entity, mapping.tenant_id, binding)) for entity in entities]
    now = jobs.now()
    with transaction.atomic():
        snapshot = Snapshot.objects.create(
            tenant_id=mapping.tenant_id, mapping=mapping, created_by=user, created_at=now, updated_at=now
        )
        made = ExportJob.objects.bulk_create(
            ExportJob(
                snapshot=snapshot,
                tenant_id=mapping.tenant_id,
                position=position,
                job_type=entity.kind,
                entity_name=entity.name,
                catalog=entity.catalog,
                column_names=list(entity.columns),
                destination=_destination(snapshot, entity),
                created_at=now,
                updated_at=now,
                **spec,
            )
            for position, (entity, spec) in enumerate(specs)
        )
        ExportEvent.objects.bulk_create(
            event(job, EventKind.CREATED, now, to_status=JobStatus.PENDING, actor=user, via=via)
            for job in made
        )
    return snapshot


# -- claim tokens -------------------------------------------------------------------


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def holds_token(job: ExportJob, token: str) -> bool:
    """Whether ``token`` is the secret of the job's current claim or poll."""
    return bool(job.claim_token_hash and token) and hmac.compare_digest(
        job.claim_token_hash, token_hash(token)
    )


def _issue_tokens(ids: list[int]) -> dict[int, str]:
    """A fresh secret for each job, its hash stored: only the caller ever sees the
    secrets, and each replaces the one an earlier holder had."""
    tokens = {pk: secrets.token_urlsafe(32) for pk in ids}
    for pk, token in tokens.items():
        ExportJob.objects.filter(pk=pk).update(claim_token_hash=token_hash(token))
    return tokens


# -- workers ------------------------------------------------------------------------


def claim(worker: str, limit: int) -> list[tuple[ExportJob, str]]:
    """Take up to ``limit`` pending jobs for ``worker``, oldest snapshot first and nodes
    before edges, each with the secret its reports must carry; two workers never take
    the same job."""
    limit = max(0, min(limit, conf.get("CLAIM_LIMIT")))
    now = jobs.now()
    with transaction.atomic():
        ids = list(
            ExportJob.objects.select_for_update(skip_locked=True)
            .filter(status=JobStatus.PENDING)
            .order_by("snapshot_id", "position")
            .values_list("pk", flat=True)[:limit]
        )
        if not ids:
            return []
        ExportJob.objects.filter(pk__in=ids).update(
            status=JobStatus.CLAIMED,
            claimed_by=worker,
            claimed_at=now,
            updated_at=now,
            generation=F("generation") + 1,
        )
        tokens = _issue_tokens(ids)
        claimed = list(ExportJob.objects.filter(pk__in=ids).order_by("snapshot_id", "position"))
        Snapshot.objects.filter(
            pk__in={job.snapshot_id for job in claimed}, status=SnapshotStatus.PENDING
        ).update(status=SnapshotStatus.CREATING, updated_at=now)
        ExportEvent.objects.bulk_create(
            event(
                job,
                EventKind.CLAIMED,
                now,
                from_status=JobStatus.PENDING,
                to_status=JobStatus.CLAIMED,
                worker=worker,
            )
            for job in claimed
        )
    return [(job, tokens[job.pk]) for job in claimed]


def due_for_poll(worker: str, limit: int) -> list[tuple[ExportJob, str]]:
    """Up to ``limit`` submitted jobs whose next poll is due, soonest first, each with a
    fresh secret for the poll's report. They are held for ``POLL_LEASE_SECONDS`` (their
    next poll moved that far on) so that two workers do not poll one job; a worker that
    dies holding them only delays their poll, and one whose lease ran out has lost its
    secret to the next poller."""
    limit = max(0, min(limit, conf.get("POLL_LIMIT")))
    now = jobs.now()
    with transaction.atomic():
        ids = list(
            ExportJob.objects.select_for_update(skip_locked=True)
            .filter(status=JobStatus.SUBMITTED, next_poll_at__lte=now)
            .order_by("next_poll_at", "pk")
            .values_list("pk", flat=True)[:limit]
        )
        if not ids:
            return []
        ExportJob.objects.filter(pk__in=ids).update(
            next_poll_at=now + timedelta(seconds=conf.get("POLL_LEASE_SECONDS"))
        )
        tokens = _issue_tokens(ids)
        taken = list(ExportJob.objects.filter(pk__in=ids).order_by("next_poll_at", "pk"))
    return [(job, tokens[job.pk]) for job in taken]


@dataclass(frozen=True)
class Report:
    """What a worker says of a job it holds. ``status`` is where the job goes: ``claimed``
    (still exporting: a heartbeat), ``submitted`` (a query was submitted, or a poll found
    it still running), ``completed`` or ``failed``."""

    status: str
    generation: int
    worker: str = ""
    # The secret given with the claim or the poll the report is about.
    claim_token: str = ""
    query_id: str = ""
    next_uri: str = ""
    # Polls of a submitted job: how many the worker saw done when it polled; a report on
    # a poll another worker has since made is refused.
    poll_count: int | None = None
    row_count: int | None = None
    size_bytes: int | None = None
    files: tuple[str, ...] = ()
    error_message: str = ""
    # An event for the job's history besides the transition (the fallback to a direct
    # export says so here).
    note: str = ""
    note_kind: str = ""


# Keyed by the status a report asks for, which is text until checked against these.
_FROM: dict[str, set[JobStatus]] = {
    # A worker shutting down hands back a job it has not finished.
    JobStatus.PENDING: {JobStatus.CLAIMED},
    # A heartbeat; or a submitted job whose engine lacks system.unload, taken back by the
    # worker that polled it to export it directly (a new claim: see _apply).
    JobStatus.CLAIMED: {JobStatus.CLAIMED, JobStatus.SUBMITTED},
    JobStatus.SUBMITTED: {JobStatus.CLAIMED, JobStatus.SUBMITTED},
    JobStatus.COMPLETED: {JobStatus.CLAIMED, JobStatus.SUBMITTED},
    JobStatus.FAILED: {JobStatus.CLAIMED, JobStatus.SUBMITTED},
}


def report(job_id: int, update: Report) -> ExportJob:
    """Apply a worker's report to the job it holds; ``ClaimLost`` if it no longer does,
    or never did (the claim's secret is not the report's).

    A job's last report also finishes its snapshot, when no other job of it is left.
    """
    if update.status not in _FROM:
        raise InvalidReport(
            f"status {update.status!r} is not one a worker reports ({', '.join(sorted(_FROM))})"
        )
    now = jobs.now()
    with transaction.atomic():
        job = ExportJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            raise ExportJob.DoesNotExist(f"no export job {job_id}")
        why = _refusal(job, update)
        if not why:
            _check_files(job, update)
            settle(job, update, now)
    if why:
        # Recorded apart from the refused change: the history shows which worker came late.
        event(
            job,
            EventKind.LATE_REFUSED,
            now,
            from_status=job.status,
            to_status=update.status,
            worker=update.worker,
            message=f"refused a report for claim {update.generation}: {why}",
        ).save()
        raise ClaimLost(job, f"claim {update.generation}", why if why == NO_SECRET else "")
    return job


NO_SECRET = "it does not carry the secret of the job's current claim or poll"


def _refusal(job: ExportJob, update: Report) -> str:
    """Why a report cannot apply to the job as it is; empty when it can."""
    if job.generation != update.generation or job.status not in _FROM[update.status]:
        return f"the job is {job.status} under claim {job.generation}"
    if not holds_token(job, update.claim_token):
        return NO_SECRET
    return ""


def _check_files(job: ExportJob, update: Report) -> None:
    """A completion's files must each lie inside the job's folder: a worker's word is
    all they are, and members are shown them."""
    if update.status != JobStatus.COMPLETED:
        return
    for location in update.files:
        if relative_inside(location, job.destination) is None:
            raise InvalidReport(f"file {location!r} is not inside the job's folder", "files")


def settle(job: ExportJob, update: Report, now: datetime | None = None) -> None:
    """Apply ``update`` to ``job``, which the caller has locked and found it applies to
    (a worker's report, or the reconciliation's finding), with its history; finish the
    snapshot if this was its last job."""
    now = now or jobs.now()
    before = job.status
    _apply(job, update, now)
    job.updated_at = now
    job.save()
    events = []
    if update.note:
        events.append(
            event(
                job, update.note_kind or EventKind.FELL_BACK, now, worker=update.worker, message=update.note
            )
        )
    if before != job.status:
        kind = EventKind.HANDED_BACK if job.status == JobStatus.PENDING else job.status
        events.append(
            event(
                job,
                kind,
                now,
                from_status=before,
                to_status=job.status,
                worker=update.worker,
                message=_transition_message(job),
            )
        )
    ExportEvent.objects.bulk_create(events)
    if job.status in JOB_FINISHED:
        finish_snapshot(job.snapshot_id)


def _apply(job: ExportJob, update: Report, now: datetime) -> None:
    status = update.status
    if job.status == JobStatus.SUBMITTED and status in (JobStatus.SUBMITTED, JobStatus.CLAIMED):
        # Whoever polled the job last may act on what the poll found, no one else.
        if update.poll_count is None or update.poll_count != job.poll_count:
            raise ClaimLost(job, f"poll {update.poll_count}")
    if status == JobStatus.PENDING:
        reset(job, now)
        return
    if status == JobStatus.CLAIMED and job.status == JobStatus.SUBMITTED:
        job.generation += 1
        job.claimed_by, job.claimed_at = update.worker, now
        job.query_id = job.next_uri = ""
        job.next_poll_at = job.submitted_at = None
    elif status == JobStatus.SUBMITTED:
        if job.status == JobStatus.CLAIMED:
            if not update.query_id:
                raise InvalidReport("a submission names its query id")
            job.query_id, job.next_uri = update.query_id, update.next_uri
            job.submitted_at, job.poll_count = now, 0
        else:
            job.poll_count += 1
            job.next_uri = update.next_uri or job.next_uri
        job.next_poll_at = now + poll_delay(job.poll_count)
    elif status == JobStatus.COMPLETED:
        if update.row_count is None or update.size_bytes is None:
            raise InvalidReport("a completed job reports its row count and size")
        if update.row_count < 0 or update.size_bytes < 0:
            raise InvalidReport("row count and size are never negative")
        job.row_count, job.size_bytes, job.files = update.row_count, update.size_bytes, list(update.files)
        job.completed_at, job.next_poll_at, job.error_message = now, None, ""
    elif status == JobStatus.FAILED:
        job.error_message = (update.error_message or "export failed")[:4000]
        job.completed_at, job.next_poll_at = now, None
    job.status = status


def _transition_message(job: ExportJob) -> str:
    if job.status == JobStatus.SUBMITTED and job.poll_count == 0:
        return f"query {job.query_id}"
    if job.status == JobStatus.COMPLETED:
        return f"{job.row_count} rows, {job.size_bytes} bytes in {len(job.files)} file(s)"
    if job.status == JobStatus.FAILED:
        return job.error_message
    return ""


def heartbeat(job_id: int, generation: int, worker: str, claim_token: str) -> ExportJob:
    """A worker still exporting a claimed job: keeps the reconciliation from resetting it."""
    return report(job_id, Report(JobStatus.CLAIMED, generation, worker=worker, claim_token=claim_token))


# -- finishing snapshots ------------------------------------------------------------


def finish_snapshot(snapshot_id: int) -> str | None:
    """Make the snapshot ``ready`` (every job completed) or ``failed`` (the first failed
    job's error) once none of its jobs is left to run; its status, or None while some are."""
    now = jobs.now()
    with transaction.atomic():
        snapshot = (
            Snapshot.objects.select_for_update()
            .filter(pk=snapshot_id, status__in=[SnapshotStatus.PENDING, SnapshotStatus.CREATING])
            .first()
        )
        if snapshot is None:
            return None
        rows = list(snapshot.jobs.order_by("position"))
        if any(job.status not in JOB_FINISHED for job in rows):
            return None
        failed = [job for job in rows if job.status == JobStatus.FAILED]
        snapshot.node_counts = {
            job.entity_name: job.row_count
            for job in rows
            if job.job_type == EntityKind.NODE and job.row_count is not None
        }
        snapshot.edge_counts = {
            job.entity_name: job.row_count
            for job in rows
            if job.job_type == EntityKind.EDGE and job.row_count is not None
        }
        snapshot.size_bytes = sum(job.size_bytes or 0 for job in rows)
        if not failed:
            try:
                seal(snapshot, rows)
            except Exception:
                # Left creating: the reconciliation's next pass seals it again.
                logger.exception("snapshot %s: could not seal its folder", snapshot.pk)
                return None
        if failed:
            first = failed[0]
            snapshot.status = SnapshotStatus.FAILED
            snapshot.error = f"{first.job_type} {first.entity_name}: {first.error_message}"
        else:
            snapshot.status, snapshot.error = SnapshotStatus.READY, ""
        snapshot.finished_at = snapshot.updated_at = now
        snapshot.save()
        return snapshot.status


def seal(snapshot: Snapshot, rows: list[ExportJob]) -> None:
    """Make the snapshot's folder one a reader can trust before the snapshot is ready:
    remove from each job's folder every file that is not the job's (the partial or
    orphaned files of claims that died or were reset), then write ``manifest.json``,
    last, listing each entity's files, rows, bytes and columns. A reader that finds the
    manifest finds exactly the snapshot; one that does not, finds no snapshot yet."""
    from exports import parquet  # pyarrow: loaded where files are read

    options = dict(conf.get("STORAGE_OPTIONS"))
    entities = []
    for job in rows:
        parquet.remove_files(job.destination, job.files, options)
        entities.append(
            {
                "kind": job.job_type,
                "name": job.entity_name,
                "rows": job.row_count,
                "bytes": job.size_bytes,
                "files": shown_files(job),
                "columns": parquet.file_columns(job.files[0], options) if job.files else [],
            }
        )
    manifest = {
        "snapshot": snapshot.pk,
        "mapping": snapshot.mapping.name,
        "created_at": snapshot.created_at.isoformat(),
        "entities": entities,
    }
    parquet.write_manifest(folder_of_snapshot(rows[0]), manifest, options)


# -- operators ----------------------------------------------------------------------


class ActionRefused(Exception):
    """An operator's action that does not apply to the job as it is; the message says why."""


def retry_job(job: ExportJob, user: Any, *, via: str = "") -> ExportJob:
    """Run a failed job again (a new claim, a fresh export), and reopen its snapshot."""
    now = jobs.now()
    with transaction.atomic():
        job = ExportJob.objects.select_for_update().get(pk=job.pk)
        if job.status != JobStatus.FAILED:
            raise ActionRefused(f"only a failed job is retried; this one is {job.status}")
        before = job.error_message
        reset(job, now)
        job.save()
        Snapshot.objects.filter(pk=job.snapshot_id).update(
            status=SnapshotStatus.CREATING, error="", finished_at=None, updated_at=now
        )
        event(
            job,
            EventKind.RETRIED,
            now,
            from_status=JobStatus.FAILED,
            to_status=JobStatus.PENDING,
            actor=user,
            via=via,
            message=f"was: {before}",
        ).save()
    return job


def reset_claim(job: ExportJob, user: Any, *, via: str = "") -> ExportJob:
    """Hand a claimed job back to pending now, as the reconciliation would after its
    timeout (a worker known to be gone). Its worker's reports are refused from then on."""
    now = jobs.now()
    with transaction.atomic():
        job = ExportJob.objects.select_for_update().get(pk=job.pk)
        if job.status != JobStatus.CLAIMED:
            raise ActionRefused(f"only a claimed job's claim is reset; this one is {job.status}")
        worker = job.claimed_by
        reset(job, now)
        job.save()
        event(
            job,
            EventKind.CLAIM_RESET,
            now,
            from_status=JobStatus.CLAIMED,
            to_status=JobStatus.PENDING,
            actor=user,
            via=via,
            message=f"taken from {worker}",
        ).save()
    return job


def cancel_snapshot(snapshot: Snapshot, user: Any, *, via: str = "") -> list[ExportJob]:
    """Fail every unfinished job of the snapshot (and so the snapshot); the queries they
    submitted are cancelled on the engine by a job. Returns the jobs cancelled."""
    now = jobs.now()
    name = getattr(user, "get_username", lambda: "the system")()
    with transaction.atomic():
        open_jobs = list(
            ExportJob.objects.select_for_update()
            .filter(snapshot_id=snapshot.pk)
            .exclude(status__in=JOB_FINISHED)
            .order_by("position")
        )
        for job in open_jobs:
            before = job.status
            job.status, job.error_message = JobStatus.FAILED, f"Cancelled by {name}"
            job.completed_at, job.updated_at, job.next_poll_at = now, now, None
            job.save()
            event(
                job,
                EventKind.CANCELLED,
                now,
                from_status=before,
                to_status=JobStatus.FAILED,
                actor=user,
                via=via,
                message=job.error_message,
            ).save()
            if before == JobStatus.SUBMITTED:
                jobs.enqueue("exports.CancelQuery", {"job": job.pk}, tenant=job.tenant_id)
        finish_snapshot(snapshot.pk)
    return open_jobs


def reset(job: ExportJob, now: datetime) -> None:
    job.status, job.claimed_by, job.claimed_at = JobStatus.PENDING, "", None
    job.claim_token_hash = ""
    job.query_id = job.next_uri = job.error_message = ""
    job.next_poll_at = job.submitted_at = job.completed_at = None
    job.poll_count, job.row_count, job.size_bytes, job.files = 0, None, None, []
    job.updated_at = now
