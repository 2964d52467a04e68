"""The export jobs' state machine: every change the engine's steps, the reconciliation,
the API or an operator makes goes through here, each in one transaction with its history.

Snapshots are made from mappings (``create_snapshot``); an entity that is a Trino query
must be one query (``exports.entity_sql``) in a catalog of the tenant's ``TrinoBinding``,
whose role its jobs run under. Each export is an engine job of type ``exports.export``,
run by a remote export worker: the engine claims, leases, fences, retries and rescues
it, and its steps call the hooks here (``HOOKS``) in their own transactions, so that the
domain row follows: the claim describes the export to its worker (``describe``), a
success records the files, which must lie in the job's folder (``record_completion``),
a snooze is a submitted UNLOAD waiting for its next poll (``record_submission``), and an
operator's cancel, retry or recovery, wherever it was taken, reaches the row
(``follow_operator``). A job's last outcome finishes its snapshot when no job of it is
left, in the same transaction; the reconciliation catches what a crash left between the
two.
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

import jobs
from exports import conf, datasets, entity_sql
from exports.models import (
    JOB_FINISHED,
    Engine,
    EntityKind,
    EventKind,
    ExportConfig,
    ExportEvent,
    ExportJob,
    JobStatus,
    Mapping,
    MappingEntity,
    Snapshot,
    SnapshotStatus,
    TrinoBinding,
)
from exports.spec import JobSpec, relative_inside, snapshot_folder

logger = logging.getLogger(__name__)

# How long a submitted job waits for its next poll: 2, 3, 5 … 89 s, then every 90 s.
POLL_SCHEDULE = jobs.Fibonacci()


class InvalidMapping(ValueError):
    """A mapping a snapshot cannot be made from; the message names the entity and why."""


# The engine job type of every export, its queue, and how long a claim's lease lasts
# without a heartbeat: its worker beats every third of it (5 s), so an operator's cancel
# or the maximum duration reaches a running export within seconds.
EXPORT_TYPE = "exports.export"
QUEUE = "exports"
LEASE_SECONDS = 15
# A completion's file list: at most this many paths, relative to the job's folder, of at
# most this many characters; the largest such list fits the remote-worker API's 1 MB
# request body (WEB_MAX_BODY_BYTES). A direct export writes one file, an UNLOAD one per
# Trino writer.
MAX_RESULT_FILES = 5_000
MAX_FILE_PATH = 180


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
        message=message[:4000],
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
        link_engine_jobs(made)
        ExportEvent.objects.bulk_create(
            event(job, EventKind.CREATED, now, to_status=JobStatus.PENDING, actor=user, via=via)
            for job in made
        )
    return snapshot


def link_engine_jobs(rows: list[ExportJob]) -> None:
    """Enqueue the engine job of each row, in order (nodes before edges, the claim order),
    and link it, in the caller's transaction. A snapshot's jobs make one pipeline, which
    the console's pipeline page draws and the snapshot's page follows."""
    if not rows:
        return
    ids = jobs.enqueue_many(
        EXPORT_TYPE,
        [{"export": row.pk} for row in rows],
        queue=QUEUE,
        tenant=rows[0].tenant_id,
        pipeline=pipeline_of(rows[0].snapshot_id) or uuid.uuid4(),
    )
    for row, job_id in zip(rows, ids, strict=True):
        row.job_id = job_id
    ExportJob.objects.bulk_update(rows, ["job"])


# -- the engine's steps of an export job ---------------------------------------------


def pipeline_of(snapshot_id: int) -> uuid.UUID | None:
    """The engine pipeline of a snapshot's jobs (None before they have one)."""
    return (
        ExportJob.objects.filter(snapshot_id=snapshot_id, job__isnull=False)
        .values_list("job__pipeline_id", flat=True)
        .first()
    )


def spec_of(row: ExportJob) -> dict[str, Any]:
    """What a worker is told of the export it claimed: everything it needs, so that it
    never reads Conveyor's tables."""
    return JobSpec(
        id=row.pk,
        snapshot_id=row.snapshot_id,
        tenant_id=row.tenant_id,
        generation=row.generation,
        job_type=row.job_type,
        entity_name=row.entity_name,
        engine=row.engine,
        sql=row.sql,
        column_names=tuple(row.column_names),
        column_types=tuple(row.column_types),
        catalog=row.catalog,
        starburst_role=row.starburst_role,
        destination=row.destination,
        status=row.status,
        query_id=row.query_id,
        next_uri=row.next_uri,
        poll_count=row.poll_count,
    ).to_json()


def _row_of(job: Any) -> ExportJob:
    """The export row the engine job runs, locked for the step's transaction."""
    row = ExportJob.objects.select_for_update().filter(job_id=job.pk).first()
    if row is None:
        raise LookupError(f"no export is linked to job {job.pk} (its snapshot was deleted)")
    return row


def describe(job: Any) -> dict[str, Any]:
    """A claim of the engine job: the export's spec for its worker. A fresh claim of a
    pending (or lost) export counts a new claim, whose files carry its number; a claim
    of a submitted one is its next poll. An export that ended meanwhile is not run."""
    now = jobs.now()
    row = _row_of(job)
    if row.status in JOB_FINISHED:
        raise ValueError(f"export {row.pk} is {row.status} already")
    if row.status != JobStatus.SUBMITTED:
        before, lost_claim = row.status, row.claimed_by
        reset(row, now)
        row.generation += 1
        row.status, row.claimed_by, row.claimed_at = JobStatus.CLAIMED, job.locked_by or "", now
        row.save()
        message = f"claim {row.generation}, attempt {job.attempts}"
        if before == JobStatus.CLAIMED:
            message += f"; the claim of {lost_claim} was lost"
        event(
            row,
            EventKind.CLAIMED,
            now,
            from_status=before,
            to_status=JobStatus.CLAIMED,
            worker=row.claimed_by,
            message=message,
        ).save()
        Snapshot.objects.filter(pk=row.snapshot_id, status=SnapshotStatus.PENDING).update(
            status=SnapshotStatus.CREATING, updated_at=now
        )
    return {"spec": spec_of(row)}


def _result_files(row: ExportJob, files: Any) -> tuple[str, ...]:
    """A completion's files, each a path inside the job's folder, as full locations.
    A worker's word is all they are, and members are shown them."""
    if not isinstance(files, list) or len(files) > MAX_RESULT_FILES:
        raise jobs.InvalidArgument(
            "result", f"result: files must be a list of at most {MAX_RESULT_FILES} paths"
        )
    located = []
    for name in files:
        if not isinstance(name, str) or not name or len(name) > MAX_FILE_PATH:
            raise jobs.InvalidArgument(
                "result", f"result: a file is a path of 1 to {MAX_FILE_PATH} characters"
            )
        location = posixpath.join(row.destination.rstrip("/"), name)
        if name.startswith("/") or "://" in name or relative_inside(location, row.destination) is None:
            raise jobs.InvalidArgument("result", f"result: file {name!r} is not inside the job's folder")
        located.append(location)
    return tuple(located)


def _count(result: dict[str, Any], key: str) -> int:
    value = result.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise jobs.InvalidArgument("result", f"result: {key} must be a count (an integer, never negative)")
    return value


def record_completion(job: Any, result: Any) -> None:
    """A success: the rows, bytes and files the worker wrote (``{"rows", "bytes",
    "files", "note"}``, files relative to the job's folder); finishes the snapshot when
    it was its last job."""
    row = _row_of(job)
    if not isinstance(result, dict):
        raise jobs.InvalidArgument("result", "result: an export's success reports rows, bytes and files")
    update = Report(
        JobStatus.COMPLETED,
        worker=job.locked_by or "",
        row_count=_count(result, "rows"),
        size_bytes=_count(result, "bytes"),
        files=_result_files(row, result.get("files")),
        note=str(result.get("note") or "")[:2000],
    )
    if row.status in JOB_FINISHED:
        return
    settle(row, update)


def record_failure(job: Any, error: str, final: bool) -> None:
    """A failed attempt: the export fails (and so may its snapshot) when no retry
    follows; otherwise it waits, pending, for the engine's next attempt. An attempt that
    ran past the maximum duration is not tried again: its engine job is cancelled. A
    query the export had submitted is cancelled on its engine either way."""
    row = _row_of(job)
    if row.status in JOB_FINISHED:
        return
    before, query = row.status, row.query_id
    # The engine's Job.ErrorKind.TIMEOUT: the attempt ran past ``time_limit``.
    if job.error_kind == "timeout":
        message = f"Export job exceeded maximum duration ({time_limit(job):.0f}s)"
        settle(row, Report(JobStatus.FAILED, worker=job.locked_by or "", error_message=message))
        if not final:
            jobs.cancel(job, reason=message, via="exports")
    elif final:
        settle(row, Report(JobStatus.FAILED, worker=job.locked_by or "", error_message=error))
    else:
        hand_back(
            row,
            EventKind.HANDED_BACK,
            worker=job.locked_by or "",
            message=f"attempt {job.attempts} of {job.max_attempts} failed, to be tried again: {error}",
        )
    if before == JobStatus.SUBMITTED and query:
        jobs.enqueue("exports.CancelQuery", {"job": row.pk, "query": query}, tenant=row.tenant_id)


def hand_back(
    row: ExportJob, kind: str, *, worker: str = "", actor: Any = None, via: str = "", message: str = ""
) -> None:
    """The export pending again, for the engine's next claim (a fresh one: what it had
    submitted or written is forgotten), with the line of its history that says why."""
    now, before = jobs.now(), row.status
    reset(row, now)
    row.save()
    event(
        row,
        kind,
        now,
        from_status=before,
        to_status=JobStatus.PENDING,
        worker=worker,
        actor=actor,
        via=via,
        message=message,
    ).save()


def record_release(job: Any) -> None:
    """Its worker handed the export back unfinished (it is stopping): pending again, for
    the next claim, which starts afresh under a new claim number."""
    row = _row_of(job)
    if row.status != JobStatus.CLAIMED:
        return  # a submitted export sleeps until its poll; nothing of it was lost
    hand_back(
        row,
        EventKind.HANDED_BACK,
        worker=row.claimed_by,
        message="handed back by its worker, which was stopping",
    )


def _text(details: dict[str, Any], key: str, limit: int, *, required: bool = False) -> str:
    value = details.get(key, "")
    if not isinstance(value, str) or len(value) > limit or (required and not value):
        need = "1 to" if required else "at most"
        raise jobs.InvalidArgument("details", f"details: {key} must be text of {need} {limit} characters")
    return value


def record_submission(job: Any, details: Any) -> float:
    """A snooze: an UNLOAD submitted by the claim (``query_id``, ``next_uri``), or a
    poll that found it still running (``next_uri``); the seconds until its next poll on
    the Fibonacci schedule, which the engine job sleeps."""
    row = _row_of(job)
    details = details if isinstance(details, dict) else {}
    if row.status == JobStatus.CLAIMED:
        update = Report(
            JobStatus.SUBMITTED,
            worker=job.locked_by or "",
            query_id=_text(details, "query_id", 200, required=True),
            next_uri=_text(details, "next_uri", 2000),
        )
    elif row.status == JobStatus.SUBMITTED:
        update = Report(
            JobStatus.SUBMITTED, worker=job.locked_by or "", next_uri=_text(details, "next_uri", 2000)
        )
    else:
        raise jobs.InvalidArgument(
            "details", f"details: export {row.pk} is {row.status}, not waiting on a query"
        )
    settle(row, update)
    return poll_delay(row.poll_count).total_seconds()


def time_limit(job: Any) -> float:
    """An attempt's time limit: the operators' maximum duration (``ExportConfig``)."""
    return float(ExportConfig.current().max_duration_seconds)


def follow_operator(job: Any, action: str, actor: Any, via: str) -> None:
    """An operator's action on the engine job, from any door, reaches the export: a
    cancel fails it (its submitted query is cancelled on its engine by a job), a retry
    runs it again and reopens its snapshot, a recovery of a lost claim hands it back."""
    _follow(_row_of(job), action, actor, via)


def _follow(row: ExportJob, action: str, actor: Any, via: str) -> None:
    now, before = jobs.now(), row.status
    if action == "cancel" and before not in JOB_FINISHED:
        name = getattr(actor, "get_username", lambda: "the system")()
        settle(
            row,
            Report(JobStatus.FAILED, error_message=f"Cancelled by {name}"),
            kind=EventKind.CANCELLED,
            actor=actor,
            via=via,
        )
        if before == JobStatus.SUBMITTED:
            jobs.enqueue("exports.CancelQuery", {"job": row.pk}, tenant=row.tenant_id)
    elif action in ("retry", "replay"):
        if before == JobStatus.COMPLETED:
            raise jobs.IllegalTransition(
                f"export {row.pk} completed and its snapshot is {row.snapshot.status}: take a new snapshot"
            )
        error = row.error_message
        hand_back(row, EventKind.RETRIED, actor=actor, via=via, message=f"was: {error}" if error else "")
        Snapshot.objects.filter(pk=row.snapshot_id).update(
            status=SnapshotStatus.CREATING, error="", finished_at=None, updated_at=now
        )
    elif action == "recover" and before == JobStatus.CLAIMED:
        hand_back(row, EventKind.CLAIM_RESET, actor=actor, via=via, message=f"taken from {row.claimed_by}")


HOOKS = jobs.RemoteHooks(
    describe=describe,
    on_complete=record_completion,
    on_fail=record_failure,
    on_snooze=record_submission,
    on_release=record_release,
    on_operator=follow_operator,
    time_limit=time_limit,
)


@dataclass(frozen=True)
class Report:
    """A step of an export: ``status`` is where it goes (``submitted``, ``completed`` or
    ``failed``), with what the step found."""

    status: str
    worker: str = ""
    query_id: str = ""
    next_uri: str = ""
    row_count: int | None = None
    size_bytes: int | None = None
    files: tuple[str, ...] = ()
    error_message: str = ""
    # An event for the job's history besides the transition (the fallback to a direct
    # export says so here).
    note: str = ""
    note_kind: str = ""


def settle(
    job: ExportJob,
    update: Report,
    now: datetime | None = None,
    *,
    kind: str = "",
    actor: Any = None,
    via: str = "",
) -> None:
    """Apply ``update`` to ``job``, which the caller has locked, with its history (the
    transition's event ``kind``, by default named after the new status); finish the
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
    if before != job.status or kind:
        events.append(
            event(
                job,
                kind or job.status,
                now,
                from_status=before,
                to_status=job.status,
                worker=update.worker,
                actor=actor,
                via=via,
                message=_transition_message(job),
            )
        )
    ExportEvent.objects.bulk_create(events)
    if job.status in JOB_FINISHED:
        finish_snapshot(job.snapshot_id)


def _apply(job: ExportJob, update: Report, now: datetime) -> None:
    status = update.status
    if status == JobStatus.SUBMITTED:
        if job.status != JobStatus.SUBMITTED:
            job.query_id, job.next_uri = update.query_id, update.next_uri
            job.submitted_at, job.poll_count = now, 0
        else:
            job.poll_count += 1
            job.next_uri = update.next_uri or job.next_uri
        job.next_poll_at = now + poll_delay(job.poll_count)
    elif status == JobStatus.COMPLETED:
        assert update.row_count is not None and update.size_bytes is not None
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


def _engine_action(row: ExportJob, action: str, actor: Any, via: str, reason: str = "") -> None:
    """The engine's action (``jobs.retry``, ``jobs.recover``, ``jobs.cancel``) on the row's
    job; its hook (``follow_operator``) moves the row."""
    if row.job is None:
        raise ActionRefused(f"export {row.pk} has no engine job (the reconciliation links a new one)")
    try:
        getattr(jobs, action)(row.job, actor=actor, reason=reason, via=via)
    except jobs.IllegalTransition as error:
        raise ActionRefused(str(error)) from None


def retry_job(job: ExportJob, user: Any, *, via: str = "") -> ExportJob:
    """Run a failed export again (a new claim, a fresh export), and reopen its snapshot:
    the engine's retry of its job."""
    if job.status != JobStatus.FAILED:
        raise ActionRefused(f"only a failed job is retried; this one is {job.status}")
    _engine_action(job, "retry", user, via)
    job.refresh_from_db()
    return job


def reset_claim(job: ExportJob, user: Any, *, via: str = "") -> ExportJob:
    """Hand a claimed export back to pending now (its worker known to be gone): the
    engine's recovery of its job, which fences that worker out."""
    if job.status != JobStatus.CLAIMED:
        raise ActionRefused(f"only a claimed job's claim is reset; this one is {job.status}")
    _engine_action(job, "recover", user, via, reason=f"claim of {job.claimed_by} reset")
    job.refresh_from_db()
    return job


def cancel_snapshot(snapshot: Snapshot, user: Any, *, via: str = "") -> list[ExportJob]:
    """Fail every unfinished job of the snapshot (and so the snapshot) by cancelling its
    engine job: a running export's worker stops it at its next heartbeat, and the
    queries they submitted are cancelled on the engine by a job. Returns the jobs
    cancelled."""
    cancelled = []
    with transaction.atomic():
        open_rows = list(
            ExportJob.objects.filter(snapshot_id=snapshot.pk)
            .exclude(status__in=JOB_FINISHED)
            .select_related("job")
            .order_by("position")
        )
        for row in open_rows:
            try:
                # The engine job's row first, then (its hook) the export's, as every step
                # of the engine takes them.
                _engine_action(row, "cancel", user, via)
            except ActionRefused:  # its engine job is gone or ended, and the row missed it
                _follow(ExportJob.objects.select_for_update().get(pk=row.pk), "cancel", user, via)
            row.refresh_from_db()
            cancelled.append(row)
        finish_snapshot(snapshot.pk)
    return cancelled


def reset(job: ExportJob, now: datetime) -> None:
    job.status, job.claimed_by, job.claimed_at = JobStatus.PENDING, "", None
    job.query_id = job.next_uri = job.error_message = ""
    job.next_poll_at = job.submitted_at = job.completed_at = None
    job.poll_count, job.row_count, job.size_bytes, job.files = 0, None, None, []
    job.updated_at = now
