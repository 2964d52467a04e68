"""Recomputing a module's stats from its entries and emissions, and its report's from
its modules: the aggregation job's one transaction (see ``factors.locks`` for why the
module lock is taken before the sums)."""

from __future__ import annotations

from decimal import Decimal

from django.db import connection

import jobs
from factors import locks, stats
from factors.entry_loads import CURRENT_IN_MODULE
from factors.models import CarbonReport, ReportModule

_TOTALS = f"""
SELECT d.data_entry_type, count(*), coalesce(sum(d.quantity), 0),
       coalesce(sum(e.kg_co2e), 0), count(*) FILTER (WHERE e.data_entry_id IS NULL)
FROM factors_dataentry d LEFT JOIN factors_emission e ON e.data_entry_id = d.id
WHERE d.module_id = %(module)s AND {CURRENT_IN_MODULE}
GROUP BY d.data_entry_type
"""


def module_totals(module_id: int) -> list[stats.TypeTotals]:
    """A module's totals per data-entry type, straight from the rows readers see (those
    of an ingest still loading, or of one that failed, are not counted)."""
    with connection.cursor() as cursor:
        cursor.execute(_TOTALS, {"module": module_id})
        return [
            stats.TypeTotals(t, n, Decimal(q), Decimal(kg), missing)
            for t, n, q, kg, missing in cursor.fetchall()
        ]


def recompute_module(module_id: int, *, job_id: int | None = None) -> dict[str, object]:
    """Replace a module's stats by a full recompute, then its report's; in the caller's
    transaction, which must be the one that records the job's success."""
    module = locks.lock_module(module_id)
    now = jobs.now()
    module.stats = stats.module_stats(module_totals(module_id))
    module.stats_updated_at, module.stats_job_id = now, job_id
    module.save(update_fields=["stats", "stats_updated_at", "stats_job"])
    report = locks.lock_report(module.report_id)
    recompute_report(report)
    return {
        "module": module_id,
        "report": report.pk,
        "entries": module.stats["entries"],
        "kg_co2e": module.stats["kg_co2e"],
        "without_factor": module.stats["without_factor"],
    }


def recompute_report(report: CarbonReport) -> None:
    """A report's stats as the sum of its modules' (the report row must be locked)."""
    modules = ReportModule.objects.filter(report=report).values_list("module_type", "stats")
    report.stats = stats.report_stats(modules)
    report.stats_updated_at = jobs.now()
    report.save(update_fields=["stats", "stats_updated_at"])
