"""The shape of module and report stats, and the arithmetic on them.

Stats are JSON documents stored on modules and reports. Amounts are decimal strings
with six decimals ("1234.500000"), never floats: the interactive path adds deltas to
them and the aggregation job recomputes them from scratch, and both must land on
exactly the same text, whatever the order of the edits.

A module's stats::

    {"entries": 3, "kg_co2e": "812.400000", "without_factor": 1,
     "by_type": {"plane": {"entries": 3, "quantity": "4200.000000", "unit": "km",
                           "kg_co2e": "812.400000", "without_factor": 1}}}

A report's stats add ``by_module`` (the same three totals per module type) and sum
``by_type`` over its modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from factors import catalog

SIX = Decimal("0.000001")
ZERO = Decimal(0)

Stats = dict[str, Any]


def amount(value: Decimal | int | str) -> str:
    """A decimal amount as stored in stats: six decimals, no exponent."""
    return str(Decimal(value).quantize(SIX))


def empty_module_stats() -> Stats:
    return {"entries": 0, "kg_co2e": amount(0), "without_factor": 0, "by_type": {}}


def empty_report_stats() -> Stats:
    return {**empty_module_stats(), "by_module": {}}


@dataclass(frozen=True)
class TypeTotals:
    """Totals of one data-entry type: a row of the aggregation, or a delta of an edit."""

    type: str
    entries: int = 0
    quantity: Decimal = ZERO
    kg_co2e: Decimal = ZERO
    without_factor: int = 0

    def __neg__(self) -> TypeTotals:
        return TypeTotals(self.type, -self.entries, -self.quantity, -self.kg_co2e, -self.without_factor)


def contribution(data_entry_type: str, quantity: Decimal, kg_co2e: Decimal | None) -> TypeTotals:
    """What one entry adds to its module's stats (no emission: counted as without factor)."""
    if kg_co2e is None:
        return TypeTotals(data_entry_type, 1, quantity, ZERO, 1)
    return TypeTotals(data_entry_type, 1, quantity, kg_co2e, 0)


def module_stats(rows: Iterable[TypeTotals]) -> Stats:
    """A module's stats from its totals per type (the aggregation's full recompute)."""
    stats = empty_module_stats()
    for row in rows:
        stats = add(stats, row)
    return stats


def add(stats: Stats, delta: TypeTotals) -> Stats:
    """``stats`` (of a module or a report) plus ``delta``; a type left with no entries
    disappears, as it would from a full recompute."""
    result = {**stats, "by_type": dict(stats.get("by_type", {}))}
    result["entries"] = stats.get("entries", 0) + delta.entries
    result["kg_co2e"] = amount(Decimal(stats.get("kg_co2e", 0)) + delta.kg_co2e)
    result["without_factor"] = stats.get("without_factor", 0) + delta.without_factor
    current = result["by_type"].get(delta.type, {})
    entries = current.get("entries", 0) + delta.entries
    if entries == 0:
        result["by_type"].pop(delta.type, None)
    else:
        result["by_type"][delta.type] = {
            "entries": entries,
            "quantity": amount(Decimal(current.get("quantity", 0)) + delta.quantity),
            "unit": catalog.spec(delta.type).unit,
            "kg_co2e": amount(Decimal(current.get("kg_co2e", 0)) + delta.kg_co2e),
            "without_factor": current.get("without_factor", 0) + delta.without_factor,
        }
    return result


def add_to_report(stats: Stats, module_type: str, delta: TypeTotals) -> Stats:
    """A report's stats plus one module's delta (totals, ``by_type`` and ``by_module``)."""
    result = add(stats, delta)
    by_module = dict(stats.get("by_module", {}))
    current = by_module.get(module_type, {"entries": 0, "kg_co2e": amount(0), "without_factor": 0})
    by_module[module_type] = {
        "entries": current["entries"] + delta.entries,
        "kg_co2e": amount(Decimal(current["kg_co2e"]) + delta.kg_co2e),
        "without_factor": current["without_factor"] + delta.without_factor,
    }
    result["by_module"] = by_module
    return result


def report_stats(modules: Iterable[tuple[str, Stats]]) -> Stats:
    """A report's stats from the stats of its modules (module type, stats)."""
    stats = empty_report_stats()
    for module_type, module in sorted(modules, key=lambda pair: pair[0]):
        for type_name, totals in sorted(module.get("by_type", {}).items()):
            stats = add_to_report(
                stats,
                module_type,
                TypeTotals(
                    type_name,
                    totals["entries"],
                    Decimal(totals["quantity"]),
                    Decimal(totals["kg_co2e"]),
                    totals["without_factor"],
                ),
            )
        stats["by_module"].setdefault(module_type, {"entries": 0, "kg_co2e": amount(0), "without_factor": 0})
    return stats
