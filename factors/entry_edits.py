"""The interactive path: a person creates, edits or deletes one entry.

Each edit is one transaction: lock the module, then its report (``factors.locks``);
validate with the rules of the CSV files; price the entry with the recalculation's own
arithmetic; write the entry and its emission; move the module's and the report's stats
by the difference between what the entry adds now and what it added before. No job, and
no recompute: the cost does not grow with the size of the report.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction

import jobs
from factors import catalog, emissions, locks, stats
from factors.errors import InvalidRequest
from factors.models import CarbonReport, DataEntry, ReportModule
from intake.csv_validation import Column, shown

logger = logging.getLogger(__name__)

Actor = Any  # a user, or None for the system


@dataclass(frozen=True)
class CleanEntry:
    data_entry_type: str
    quantity: Decimal
    unit: str
    classification: dict[str, str]


@dataclass(frozen=True)
class EntryChange:
    """The outcome of an edit: the entry (None once deleted), its emission and the stats."""

    entry: DataEntry | None
    emission: emissions.Priced | None
    module: ReportModule
    report: CarbonReport

    @property
    def warnings(self) -> list[str]:
        if self.entry is None or self.emission is not None:
            return []
        keys = ", ".join(f"{k}={v}" for k, v in sorted(self.entry.classification.items()))
        return [
            f"no emission factor for {self.entry.data_entry_type} {self.entry.year} "
            f"({keys}): the entry counts as without factor until one is uploaded"
        ]


def clean_entry(
    module: ReportModule, data: Mapping[str, Any], current: DataEntry | None = None
) -> CleanEntry:
    """Validate an entry's fields with the rules of the CSV files; InvalidRequest names
    each bad field. ``current``: the entry being edited (fields not given are kept)."""
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(data) - {"data_entry_type", "quantity", "unit", "classification"})
    for name in unknown:
        errors[name] = ["unknown field"]
    entry_type = data.get("data_entry_type", current.data_entry_type if current else None)
    spec = _entry_spec(module, entry_type, errors)
    quantity = _clean_quantity(data.get("quantity", current.quantity if current else None), errors)
    classification = data.get("classification", current.classification if current else None)
    if spec is None:
        raise InvalidRequest(errors)
    unit = _clean_unit(spec, data.get("unit", spec.unit), errors)
    classification = _clean_classification(spec, classification, errors)
    if errors:
        raise InvalidRequest(errors)
    return CleanEntry(spec.type, quantity, unit, classification)  # type: ignore[arg-type]


def _entry_spec(
    module: ReportModule, entry_type: Any, errors: dict[str, list[str]]
) -> catalog.EntryTypeSpec | None:
    if entry_type is None:
        errors["data_entry_type"] = ["required"]
        return None
    if not isinstance(entry_type, str) or entry_type not in catalog.SPECS:
        errors["data_entry_type"] = [
            f"unknown type {shown(str(entry_type))}; use one of "
            f"{', '.join(catalog.types_of(module.module_type))}"
        ]
        return None
    spec = catalog.SPECS[entry_type]
    if spec.module_type != module.module_type:
        errors["data_entry_type"] = [
            f"{entry_type} entries belong to the {spec.module_type} module, not {module.module_type}"
        ]
        return None
    return spec


def _clean_quantity(value: Any, errors: dict[str, list[str]]) -> Decimal | None:
    if value is None or isinstance(value, bool):
        errors["quantity"] = ["required: a non-negative number"]
        return None
    text, reason = Column("quantity", "number").check(str(value))
    if reason:
        errors["quantity"] = [reason]
        return None
    return Decimal(text)


def _clean_unit(spec: catalog.EntryTypeSpec, value: Any, errors: dict[str, list[str]]) -> str:
    _, reason = Column("unit", "fixed", value=spec.unit).check(str(value))
    if reason:
        errors["unit"] = [f"{spec.type} entries are in {spec.unit}: {reason}"]
    return spec.unit


def _clean_classification(
    spec: catalog.EntryTypeSpec, value: Any, errors: dict[str, list[str]]
) -> dict[str, str]:
    if not isinstance(value, dict):
        errors["classification"] = [f"required: an object with {', '.join(spec.keys)} ({spec.help})"]
        return {}
    problems = [f"unknown key {shown(key)}" for key in sorted(set(value) - set(spec.keys))]
    problems += [f"missing key {key!r} ({spec.help})" for key in spec.keys if key not in value]
    clean = {}
    for key in spec.keys:
        if key in value:
            text, reason = Column(key, "code").check(str(value[key]))
            if reason:
                problems.append(f"{key}: {reason}")
            clean[key] = text.lower()
    if problems:
        errors["classification"] = problems
    return clean


@transaction.atomic
def create_entry(module_id: int, data: Mapping[str, Any], *, actor: Actor) -> EntryChange:
    """Add one manual entry, price it and add it to the stats."""
    module, report = _lock(module_id)
    clean = clean_entry(module, data)
    priced = emissions.price(clean.data_entry_type, report.year, clean.classification, clean.quantity)
    now = jobs.now()
    entry = DataEntry.objects.create(
        module=module,
        data_entry_type=clean.data_entry_type,
        year=report.year,
        quantity=clean.quantity,
        unit=clean.unit,
        classification=clean.classification,
        source=DataEntry.Source.MANUAL,
        created_by=actor_user(actor),
        updated_by=actor_user(actor),
        created_at=now,
        updated_at=now,
    )
    emissions.store(entry.pk, priced)
    _apply(module, report, [_contribution(clean, priced)])
    _log("created", entry.pk, module, actor)
    return EntryChange(entry, priced, module, report)


@transaction.atomic
def update_entry(module_id: int, entry_id: int, data: Mapping[str, Any], *, actor: Actor) -> EntryChange:
    """Change fields of one entry (any source), re-price it and move the stats by the
    difference."""
    module, report = _lock(module_id)
    entry, before = _locked_entry(module, entry_id)
    clean = clean_entry(module, data, current=entry)
    priced = emissions.price(clean.data_entry_type, report.year, clean.classification, clean.quantity)
    entry.data_entry_type, entry.quantity = clean.data_entry_type, clean.quantity
    entry.unit, entry.classification = clean.unit, clean.classification
    entry.updated_by, entry.updated_at = actor_user(actor), jobs.now()
    entry.save(
        update_fields=["data_entry_type", "quantity", "unit", "classification", "updated_by", "updated_at"]
    )
    emissions.store(entry.pk, priced)
    _apply(module, report, [-before, _contribution(clean, priced)])
    _log("updated", entry.pk, module, actor)
    return EntryChange(entry, priced, module, report)


@transaction.atomic
def delete_entry(module_id: int, entry_id: int, *, actor: Actor) -> EntryChange:
    """Delete one entry (its emission goes with it) and take it out of the stats."""
    module, report = _lock(module_id)
    entry, before = _locked_entry(module, entry_id)
    entry.delete()
    _apply(module, report, [-before])
    _log("deleted", entry_id, module, actor)
    return EntryChange(None, None, module, report)


def _lock(module_id: int) -> tuple[ReportModule, CarbonReport]:
    """The module, then its report, locked in that order (``factors.locks``)."""
    try:
        module = locks.lock_module(module_id)
    except ReportModule.DoesNotExist:
        raise InvalidRequest({"module": [f"no module {module_id}"]}) from None
    return module, locks.lock_report(module.report_id)


def _locked_entry(module: ReportModule, entry_id: int) -> tuple[DataEntry, stats.TypeTotals]:
    """The entry, locked, and what it currently adds to the stats."""
    entry = (
        DataEntry.objects.current()
        .select_for_update(of=("self",))
        .select_related("emission", "created_by")
        .filter(module=module, pk=entry_id)
        .first()
    )
    if entry is None:
        raise InvalidRequest({"entry": [f"no entry {entry_id} in this module"]})
    emission = getattr(entry, "emission", None)
    kg = emission.kg_co2e if emission is not None else None
    return entry, stats.contribution(entry.data_entry_type, entry.quantity, kg)


def _contribution(clean: CleanEntry, priced: emissions.Priced | None) -> stats.TypeTotals:
    return stats.contribution(clean.data_entry_type, clean.quantity, priced.kg_co2e if priced else None)


def _apply(module: ReportModule, report: CarbonReport, deltas: list[stats.TypeTotals]) -> None:
    now = jobs.now()
    for delta in deltas:
        module.stats = stats.add(module.stats, delta)
        report.stats = stats.add_to_report(report.stats, module.module_type, delta)
    module.stats_updated_at = report.stats_updated_at = now
    module.save(update_fields=["stats", "stats_updated_at"])
    report.save(update_fields=["stats", "stats_updated_at"])


def _log(action: str, entry_id: int, module: ReportModule, actor: Actor) -> None:
    """Who changed which entry: the entry keeps its creator and last editor, the log also
    keeps deletions."""
    user = actor_user(actor)
    logger.info(
        "data entry %s %s by %s",
        entry_id,
        action,
        user or "the system",
        extra={
            "entry": entry_id,
            "report_module": module.pk,
            "action": action,
            "user": getattr(user, "pk", None),
        },
    )


def actor_user(actor: Actor) -> Any:
    """The user to record as the one who acted (None for the system or an anonymous one)."""
    return actor if getattr(actor, "is_authenticated", False) else None
