"""Mappings and snapshots for the exports' tests."""

from __future__ import annotations

from typing import Any

from exports import services
from exports.models import ExportJob, Mapping, MappingEntity, Snapshot
from tests.base import tenant as make_tenant


def mapping(name: str = "co2", *, of: Any = None, role: str = "analytics",
            entities: list[dict[str, Any]] | None = None) -> Mapping:
    """A mapping with (by default) two dataset nodes and one dataset edge."""
    owner = of or make_tenant()
    made = Mapping.objects.create(tenant=owner, name=name, starburst_role=role)
    for position, spec in enumerate(entities or [
        {"kind": "node", "name": "entries", "dataset": "data_entries",
         "columns": ["id", "quantity", "classification", "created_at"]},
        {"kind": "edge", "name": "computed_with", "dataset": "emissions",
         "columns": ["data_entry_id", "factor_id", "kg_co2e"]},
        {"kind": "node", "name": "factors", "dataset": "emission_factors",
         "columns": ["id", "value", "is_stale"]},
    ]):
        MappingEntity.objects.create(mapping=made, position=position, **spec)
    return made


def snapshot(**options: Any) -> Snapshot:
    return services.create_snapshot(mapping(**options))


def jobs_of(snap: Snapshot) -> list[ExportJob]:
    return list(snap.jobs.order_by("position"))


def complete(job: ExportJob, rows: int = 10, size: int = 100) -> ExportJob:
    return services.report(job.pk, services.Report(
        "completed", job.generation, worker=job.claimed_by or "w", row_count=rows, size_bytes=size,
        files=(f"{job.destination}/part-g{job.generation}.parquet",)))
