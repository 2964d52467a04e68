"""Applying a unit directory (the organisation chart of one reporting year): units are
upserted by code, parents and tenants resolved, and every listed unit gets its carbon
report for that year (with one module per module type) if it has none yet.

Units missing from the directory are left alone (their reports and entries are history)
and named in the result. Opening an empty report writes no stats that a job computes, so
the one-writer rule of the bulk path holds.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any, BinaryIO

import jobs
from factors import stats
from factors.catalog import ModuleType
from factors.models import CarbonReport, ReportModule, Unit
from tenancy.models import Tenant


@dataclass(frozen=True)
class UnitRow:
    code: str
    name: str
    parent: str
    tenant: str


def read_rows(canonical: BinaryIO, columns: tuple[str, ...]) -> list[UnitRow]:
    """The rows of a validated directory: canonical CSV (no header), ``columns`` in order."""
    rows = []
    for cells in csv.reader(io.TextIOWrapper(canonical, encoding="utf-8", newline="")):
        record = dict(zip(columns, cells, strict=True))
        rows.append(
            UnitRow(record["code"], record["name"], record.get("parent", ""), record.get("tenant", ""))
        )
    return rows


def apply(rows: list[UnitRow], year: int, ctx: jobs.JobContext) -> dict[str, Any]:
    """Write the directory in one (fenced) transaction; PermanentError names unresolvable
    rows."""
    job_id = ctx.job.pk
    with ctx.batch(relaxed=False):
        tenants = _tenants(rows)
        existing = dict(Unit.objects.values_list("code", "pk"))
        _check_parents(rows, existing)
        Unit.objects.bulk_create(
            [
                Unit(
                    code=row.code,
                    name=row.name,
                    tenant_id=tenants.get(row.tenant),
                    last_synced_job_id=job_id,
                    last_synced_year=year,
                )
                for row in rows
            ],
            update_conflicts=True,
            unique_fields=["code"],
            update_fields=["name", "tenant", "last_synced_job", "last_synced_year", "updated_at"],
        )
        units = list(Unit.objects.filter(code__in=[row.code for row in rows]))
        ids = {unit.code: unit.pk for unit in units}
        parents = {row.code: row.parent for row in rows}
        for unit in units:
            unit.parent_id = ids.get(parents[unit.code]) or existing.get(parents[unit.code])
        Unit.objects.bulk_update(units, ["parent"], batch_size=1000)
        opened = open_reports(list(ids.values()), year)
    listed = {row.code for row in rows}
    absent = sorted(code for code in existing if code not in listed)
    return {
        "year": year,
        "units": len(rows),
        "created": len(listed - set(existing)),
        "updated": len(listed & set(existing)),
        "reports_opened": opened,
        "absent": absent[:50],
        "absent_count": len(absent),
    }


def open_reports(unit_ids: list[int], year: int, created_by: Any = None) -> int:
    """Create the missing reports of ``year`` for these units, with their modules."""
    have = set(CarbonReport.objects.filter(unit_id__in=unit_ids, year=year).values_list("unit_id", flat=True))
    new = [
        CarbonReport(
            unit_id=uid,
            year=year,
            created_by=created_by,
            stats=stats.report_stats((m, stats.empty_module_stats()) for m in ModuleType.values),
        )
        for uid in unit_ids
        if uid not in have
    ]
    CarbonReport.objects.bulk_create(new, ignore_conflicts=True)
    reports = CarbonReport.objects.filter(unit_id__in=unit_ids, year=year)
    ReportModule.objects.bulk_create(
        [
            ReportModule(report=report, module_type=module_type)
            for report in reports
            for module_type in ModuleType.values
        ],
        ignore_conflicts=True,
    )
    return len(new)


def _tenants(rows: list[UnitRow]) -> dict[str, int]:
    slugs = {row.tenant for row in rows if row.tenant}
    found = dict(Tenant.objects.filter(slug__in=slugs).values_list("slug", "pk"))
    unknown = sorted(slugs - set(found))
    if unknown:
        raise jobs.PermanentError(f"unknown tenant(s): {', '.join(unknown[:20])}")
    return found


def _check_parents(rows: list[UnitRow], existing: dict[str, int]) -> None:
    listed = {row.code: row.parent for row in rows}
    problems = [
        f"{row.code}: parent {row.parent} is neither listed nor known"
        for row in rows
        if row.parent and row.parent not in listed and row.parent not in existing
    ]
    problems += [f"{code}: its parents form a cycle" for code in listed if _in_cycle(code, listed)]
    if problems:
        raise jobs.PermanentError("; ".join(problems[:20]))


def _in_cycle(code: str, parents: dict[str, str]) -> bool:
    seen, current = set(), code
    while current in parents and parents[current]:
        if current in seen:
            return True
        seen.add(current)
        current = parents[current]
    return False
