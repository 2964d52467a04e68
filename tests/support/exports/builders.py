"""Mappings and snapshots for the exports' tests."""

from __future__ import annotations

from typing import Any

from exports import services
from exports.models import ExportJob, Mapping, MappingEntity, Snapshot, TrinoBinding
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


def claim_jobs(worker: str, limit: int) -> list[ExportJob]:
    """Claimed jobs, each holding its claim's secret as ``job.token``."""
    taken = []
    for job, token in services.claim(worker, limit):
        job.token = token
        taken.append(job)
    return taken


def polled_jobs(worker: str, limit: int) -> list[ExportJob]:
    """Submitted jobs taken for a poll, each holding the poll's secret as ``job.token``."""
    taken = []
    for job, token in services.due_for_poll(worker, limit):
        job.token = token
        taken.append(job)
    return taken


def report(job: ExportJob, status: str, **fields: Any) -> ExportJob:
    """A report on ``job`` from the worker holding it (its claim's number and secret)."""
    fields.setdefault("worker", job.claimed_by or "w")
    fields.setdefault("claim_token", getattr(job, "token", ""))
    fields.setdefault("generation", job.generation)
    answer = services.report(job.pk, services.Report(status, **fields))
    answer.token = fields["claim_token"]
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
    return report(job, "completed", row_count=rows, size_bytes=size, files=tuple(written.files))
