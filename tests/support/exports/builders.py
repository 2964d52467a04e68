"""Mappings and snapshots for the exports' tests."""

from __future__ import annotations

from typing import Any

from exports import services
from exports.models import ExportJob, Mapping, MappingEntity, Snapshot, TrinoBinding
from exports.spec import relative_inside
from jobs import remote
from tests.support.base import tenant as make_tenant

CATALOG = "lake"


def binding(owner: Any, role: str = "analytics", catalogs: tuple[str, ...] = (CATALOG,)) -> TrinoBinding:
    """The tenant's Trino role and catalogs, as a platform operator binds them."""
    made, _ = TrinoBinding.objects.update_or_create(
        tenant=owner, defaults={"role": role, "catalogs": list(catalogs)}
    )
    return made


def mapping(
    name: str = "co2",
    *,
    of: Any = None,
    role: str | None = "analytics",
    entities: list[dict[str, Any]] | None = None,
) -> Mapping:
    """A mapping with (by default) two dataset nodes and one dataset edge, of a tenant
    bound to ``role`` and the catalog ``lake`` (no binding when ``role`` is None)."""
    owner = of or make_tenant()
    if role is not None:
        binding(owner, role)
    made = Mapping.objects.create(tenant=owner, name=name)
    for position, spec in enumerate(
        entities
        or [
            {
                "kind": "node",
                "name": "entries",
                "dataset": "data_entries",
                "columns": ["id", "quantity", "classification", "created_at"],
            },
            {
                "kind": "edge",
                "name": "computed_with",
                "dataset": "emissions",
                "columns": ["data_entry_id", "factor_id", "kg_co2e"],
            },
            {
                "kind": "node",
                "name": "factors",
                "dataset": "emission_factors",
                "columns": ["id", "value", "is_stale"],
            },
        ]
    ):
        MappingEntity.objects.create(mapping=made, position=position, **spec)
    return made


def snapshot(**options: Any) -> Snapshot:
    return services.create_snapshot(mapping(**options))


def jobs_of(snap: Snapshot) -> list[ExportJob]:
    return list(snap.jobs.order_by("position"))


# The export workers' credential, as JOBS_REMOTE_WORKERS holds it.
WORKER_TOKEN = "e" * 40
CREDENTIAL = remote.Credential("exports", ("exports",), WORKER_TOKEN)


def claim_jobs(worker: str, limit: int) -> list[ExportJob]:
    """What an export worker's claim takes, through the engine (fresh exports and
    submitted ones due for a poll alike): the export rows, in claim order, each holding
    its engine job as ``row.engine_job`` and the claim's lease as ``row.lease``."""
    claimed = remote.claim(CREDENTIAL, worker, limit=limit, queues=["exports"])
    rows = {row.job_id: row for row in ExportJob.objects.filter(job_id__in=[job.pk for job in claimed.jobs])}
    taken = []
    for job in claimed.jobs:
        row = rows[job.pk]
        row.engine_job, row.lease, row.worker = job, claimed.token, worker
        taken.append(row)
    return taken


# A submitted export's poll is a claim of its engine job once its snooze has ended.
polled_jobs = claim_jobs


def report(job: ExportJob, status: str, **fields: Any) -> ExportJob:
    """A step of the worker holding ``job`` (a row from ``claim_jobs``), through the
    engine: ``completed`` (rows, bytes, files relative to the job's folder, note),
    ``failed`` (error, permanent), ``submitted`` (query_id, next_uri: a snooze until the
    next poll). The row as it is after the step, still holding the claim's lease."""
    worker = getattr(job, "worker", "w")
    if status == "completed":
        result = {
            "rows": fields.get("rows", fields.get("row_count")),
            "bytes": fields.get("bytes", fields.get("size_bytes")),
            # Full locations are said relative to the job's folder, as a worker says them.
            "files": [
                relative_inside(name, job.destination) or name if "/" in name[:1] or "://" in name else name
                for name in fields.get("files", ())
            ],
        }
        if fields.get("note"):
            result["note"] = fields["note"]
        remote.complete(CREDENTIAL, worker, job.job_id, job.lease, result=result)
    elif status == "failed":
        remote.fail(
            CREDENTIAL,
            worker,
            job.job_id,
            job.lease,
            error=fields.get("error") or fields.get("error_message") or "export failed",
            permanent=fields.get("permanent", True),
        )
    elif status == "submitted":
        remote.snooze(CREDENTIAL, worker, job.job_id, job.lease, seconds=2, details=fields)
    else:
        raise ValueError(f"no step {status!r}")
    answer = ExportJob.objects.get(pk=job.pk)
    answer.engine_job, answer.lease, answer.worker = getattr(job, "engine_job", None), job.lease, worker
    return answer


def write_part(destination: str, name: str, rows: int = 10) -> Any:
    """A real Parquet file of ``rows`` rows, as a worker writes one; its ``Written``."""
    import pyarrow as pa

    from exports import parquet

    table = pa.table({"n": pa.array(range(rows), pa.int64())})
    return parquet.write_batches(table.to_batches(), table.schema, destination, name)


def complete(job: ExportJob, rows: int = 10, size: int = 100) -> ExportJob:
    """The worker's completion of ``job``, with a real file of ``rows`` rows in its folder
    (the snapshot's manifest reads its columns)."""
    written = write_part(job.destination, f"part-g{job.generation}.parquet", rows)
    files = [relative_inside(location, job.destination) for location in written.files]
    return report(job, "completed", rows=rows, bytes=size, files=files)
