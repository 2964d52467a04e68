"""Builders for the CO2 calculator's tests: units, reports, factors and CSV files."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from factors import catalog, services, unit_directory
from factors.models import CarbonReport, EmissionFactor, ReportModule, Unit
from jobs import clock
from tenancy.models import Tenant

SIX = Decimal("0.000001")


def report(code: str = "LAB1", year: int = 2024, tenant: Tenant | None = None) -> CarbonReport:
    unit, _ = Unit.objects.get_or_create(code=code, defaults={"name": f"Unit {code}", "tenant": tenant})
    unit_directory.open_reports([unit.pk], year)
    return CarbonReport.objects.get(unit=unit, year=year)


def module(of: CarbonReport, module_type: str = "travel") -> ReportModule:
    return ReportModule.objects.get(report=of, module_type=module_type)


def factor(data_entry_type: str, year: int, classification: dict[str, str], value: str) -> EmissionFactor:
    now = clock.now()
    return EmissionFactor.objects.create(
        data_entry_type=data_entry_type,
        year=year,
        classification=classification,
        value=Decimal(value),
        unit=catalog.spec(data_entry_type).unit,
        source="test",
        created_at=now,
        updated_at=now,
    )


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[Any]], *, newline: str = "\n") -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=newline)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode()


def plane_rows(n: int, *, start: int = 0) -> list[list[str]]:
    """``n`` plane entries cycling over hauls and cabins, with varied quantities."""
    hauls, cabins = ["short", "medium", "long"], ["economy", "business"]
    return [
        [
            f"{(start + i) * 7 % 5000 + 10}.{(start + i) % 100:02d}",
            "km",
            hauls[(start + i) % 3],
            cabins[(start + i) % 2],
        ]
        for i in range(n)
    ]


PLANE_FACTORS = {
    ("short", "economy"): "0.151",
    ("short", "business"): "0.226",
    ("medium", "economy"): "0.098",
    ("medium", "business"): "0.285",
    ("long", "economy"): "0.102",
    ("long", "business"): "0.296",
}


def plane_factors(year: int = 2024, *, skip: Iterable[tuple[str, str]] = ()) -> None:
    for (haul, cabin), value in PLANE_FACTORS.items():
        if (haul, cabin) not in set(skip):
            factor("plane", year, {"haul": haul, "cabin": cabin}, value)


def expected_totals(
    rows: Iterable[Sequence[str]], factors: dict[tuple[str, str], str] = PLANE_FACTORS
) -> tuple[int, Decimal, Decimal, int]:
    """Entries, quantity, kg CO2e and entries without factor, computed here, in Python."""
    count, quantity, kg, missing = 0, Decimal(0), Decimal(0), 0
    for q, _unit, haul, cabin in rows:
        count += 1
        quantity += Decimal(q)
        value = factors.get((haul, cabin))
        if value is None:
            missing += 1
        else:
            kg += (Decimal(q) * Decimal(value)).quantize(SIX)
    return count, quantity, kg, missing


def dispatch(
    mod: ReportModule, body: bytes, data_entry_type: str = "plane", actor: Any = None
) -> services.Dispatched:
    return services.dispatch_csv(mod, data_entry_type, io.BytesIO(body), filename="test.csv", actor=actor)
