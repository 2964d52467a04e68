"""The exports demo (``manage.py demo exports``): a mapping of the demo organisation's
data and one snapshot of it, for a new user; the export worker that ``./conveyor start``
runs writes its Parquet files. Idempotent: once the mapping has a snapshot, it does
nothing. Its entities are Conveyor's own datasets, so the demo tenant needs no Trino
binding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from exports import conf, services
from exports.models import Mapping, MappingEntity
from tenancy.models import Tenant

MAPPING = "demo-export"
ENTITIES = [
    {
        "kind": "node",
        "name": "factors",
        "dataset": "emission_factors",
        "columns": ["id", "data_entry_type", "year", "classification", "value", "unit"],
    },
    {
        "kind": "node",
        "name": "daily_bars",
        "dataset": "daily_bars",
        "columns": ["feed", "ts_code", "trade_date", "close", "vol"],
    },
]


def load(write: Callable[[str], Any], *, actor: Any) -> None:
    """Create the demo export mapping and queue its first snapshot."""
    with transaction.atomic():
        tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo organisation"})
        mapping, created = Mapping.objects.get_or_create(
            tenant=tenant,
            name=MAPPING,
            defaults={"description": "The emission factors and the demo feed's daily bars."},
        )
        if created:
            for position, entity in enumerate(ENTITIES):
                MappingEntity.objects.create(mapping=mapping, position=position, **entity)
        if mapping.snapshots.exists():
            write("The export demo is already queued.")
            return
        snapshot = services.create_snapshot(mapping, user=actor)
    write(
        f"Export demo: snapshot {snapshot.pk} of mapping {MAPPING} is queued; "
        f"the export worker writes it under {conf.storage_url()}."
    )
