"""Computing emissions: set-based for the recalculation job, one row for an edit.

An entry's emission is ``round(quantity × factor.value, 6)`` kg CO2e with the factor of
the same data-entry type, year and classification (JSONB equality, so key order never
matters). An entry without such a factor gets no emission row: it is counted as
"without factor" in the stats and listed in the job's result, never silently zero.

The recalculation walks its scope in id order, ``RECALC_BATCH_ROWS`` entries per
transaction. Each batch prices its entries once (a join to the factors, materialised),
upserts the emissions of those that have a factor (``INSERT … SELECT … ON CONFLICT
(data_entry_id) DO UPDATE``, rewriting only rows whose factor or amount changed) and
deletes those of entries that lost their factor. Running it twice leaves the same rows.

Batches are fenced and commit without waiting for the disk (``factors.fence``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import connection

import jobs
from factors import conf, locks

MISSING_SAMPLE = 20


@dataclass(frozen=True)
class Scope:
    """Which entries a recalculation covers: one module's entries of a type, or every
    entry of a type (optionally of some years)."""

    data_entry_type: str
    module_id: int | None = None
    years: tuple[int, ...] = ()
    # Entry ids after ``after`` and up to ``upto`` (no upper bound when None): the rows
    # an ingest has loaded so far (``factors.recalc_chunks``).
    after: int = 0
    upto: int | None = None

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "data_entry_type": self.data_entry_type,
            "module": self.module_id,
            "years": list(self.years),
        }
        if self.after or self.upto is not None:
            data["ids"] = [self.after, self.upto]
        return data

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> Scope:
        module = data.get("module")
        after, upto = data.get("ids") or (0, None)
        return cls(
            data["data_entry_type"],
            int(module) if module is not None else None,
            tuple(int(year) for year in data.get("years") or ()),
            int(after),
            None if upto is None else int(upto),
        )

    def where(self) -> tuple[str, dict[str, Any]]:
        """The SQL condition on ``factors_dataentry d`` and its parameters."""
        condition = "d.data_entry_type = %(type)s"
        params: dict[str, Any] = {"type": self.data_entry_type}
        if self.module_id is not None:
            condition += " AND d.module_id = %(module)s"
            params["module"] = self.module_id
        if self.years:
            condition += " AND d.year = ANY(%(years)s)"
            params["years"] = list(self.years)
        if self.upto is not None:
            condition += " AND d.id <= %(upto_id)s"
            params["upto_id"] = self.upto
        return condition, params

    def describe(self) -> str:
        text = f"{self.data_entry_type} entries"
        if self.module_id is not None:
            text += f" of module {self.module_id}"
        if self.years:
            text += f" of {', '.join(map(str, self.years))}"
        if self.upto is not None:
            text += f", ids {self.after + 1:,} to {self.upto:,}"
        elif self.after:
            text += f", ids after {self.after:,}"
        return text


@dataclass
class RecalcResult:
    entries: int = 0
    with_factor: int = 0
    without_factor: int = 0
    changed: int = 0
    removed: int = 0
    modules: set[int] = field(default_factory=set)
    missing: dict[str, int] = field(default_factory=dict)

    def add_missing(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            key = f"{row['year']} {json.dumps(row['classification'], sort_keys=True)}"
            if key in self.missing or len(self.missing) < MISSING_SAMPLE:
                self.missing[key] = self.missing.get(key, 0) + row["entries"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "with_factor": self.with_factor,
            "without_factor": self.without_factor,
            "changed": self.changed,
            "removed": self.removed,
            "modules": len(self.modules),
            "missing_factors": [
                {"key": key, "entries": count} for key, count in sorted(self.missing.items())
            ],
        }


def recalculate(scope: Scope, ctx: jobs.JobContext) -> RecalcResult:
    """Recompute the emissions of every entry in ``scope``, batch by batch."""
    result = RecalcResult()
    total = None
    if scope.module_id is not None:
        result.modules.add(scope.module_id)
        total = _count(scope)
    after, size = scope.after, conf.recalc_batch_rows()
    while True:
        with ctx.batch():
            bounds = _next_batch(scope, after, size)
            if bounds is None:
                break
            upto, modules = bounds
            locks.share_modules(modules)
            _recalc_batch(scope, after, upto, ctx.job.pk, result)
        result.modules.update(modules)
        after = upto
        ctx.progress(
            result.entries,
            total,
            f"{result.entries:,} entries recalculated ({result.without_factor:,} without factor)",
        )
    return result


def _count(scope: Scope) -> int:
    condition, params = scope.where()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM factors_dataentry d WHERE {condition} AND d.id > %(after)s",
            {**params, "after": scope.after},
        )
        return cursor.fetchone()[0]


def _next_batch(scope: Scope, after: int, size: int) -> tuple[int, list[int]] | None:
    """The last id and the modules of the next batch (locked before it is written)."""
    condition, params = scope.where()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT max(id), array_agg(DISTINCT module_id) FROM ("
            f"SELECT d.id, d.module_id FROM factors_dataentry d WHERE {condition} "
            f"AND d.id > %(after)s ORDER BY d.id LIMIT %(size)s) b",
            {**params, "after": after, "size": size},
        )
        upto, modules = cursor.fetchone()
    return None if upto is None else (upto, modules)


_RECALC = """
WITH batch AS MATERIALIZED (
    SELECT d.id, d.year, d.classification, f.id AS factor_id,
           round(d.quantity * f.value, 6) AS kg
    FROM factors_dataentry d LEFT JOIN factors_emissionfactor f
      ON f.data_entry_type = d.data_entry_type AND f.year = d.year
     AND f.classification = d.classification
    WHERE {condition} AND d.id > %(after)s AND d.id <= %(upto)s
), upserted AS (
    INSERT INTO factors_emission (data_entry_id, factor_id, kg_co2e, job_id, computed_at)
    SELECT id, factor_id, kg, %(job)s, %(now)s FROM batch WHERE factor_id IS NOT NULL
    ORDER BY id
    ON CONFLICT (data_entry_id) DO UPDATE
       SET factor_id = EXCLUDED.factor_id, kg_co2e = EXCLUDED.kg_co2e,
           job_id = EXCLUDED.job_id, computed_at = EXCLUDED.computed_at
     WHERE (factors_emission.factor_id, factors_emission.kg_co2e)
           IS DISTINCT FROM (EXCLUDED.factor_id, EXCLUDED.kg_co2e)
    RETURNING 1
), removed AS (
    DELETE FROM factors_emission e USING batch b
    WHERE b.factor_id IS NULL AND e.data_entry_id = b.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM batch), (SELECT count(factor_id) FROM batch),
       (SELECT count(*) FROM upserted), (SELECT count(*) FROM removed),
       (SELECT coalesce(jsonb_agg(m), '[]') FROM (
            SELECT b.year, b.classification, count(*) AS entries FROM batch b
            WHERE b.factor_id IS NULL
            GROUP BY b.year, b.classification ORDER BY count(*) DESC LIMIT %(sample)s) m)
"""


def _recalc_batch(scope: Scope, after: int, upto: int, job_id: int | None, result: RecalcResult) -> None:
    condition, params = scope.where()
    with connection.cursor() as cursor:
        cursor.execute(
            _RECALC.format(condition=condition),
            {
                **params,
                "after": after,
                "upto": upto,
                "job": job_id,
                "now": jobs.now(),
                "sample": MISSING_SAMPLE,
            },
        )
        entries, priced, changed, removed, missing = cursor.fetchone()
    result.entries += entries
    result.with_factor += priced
    result.without_factor += entries - priced
    result.changed += changed
    result.removed += removed
    result.add_missing(json.loads(missing) if isinstance(missing, str) else missing)


# --- one entry (the interactive path) ---------------------------------------------------------


@dataclass(frozen=True)
class Priced:
    factor_id: int
    kg_co2e: Decimal


def price(
    data_entry_type: str, year: int, classification: dict[str, str], quantity: Decimal
) -> Priced | None:
    """The factor and emission of one entry, with the recalculation's own arithmetic."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, round(%s::numeric * value, 6) FROM factors_emissionfactor "
            "WHERE data_entry_type = %s AND year = %s AND classification = %s::jsonb",
            [quantity, data_entry_type, year, json.dumps(classification)],
        )
        row = cursor.fetchone()
    return None if row is None else Priced(row[0], row[1])


def store(entry_id: int, priced: Priced | None) -> None:
    """Write (or remove) one entry's emission; an interactive edit computed it."""
    with connection.cursor() as cursor:
        if priced is None:
            cursor.execute("DELETE FROM factors_emission WHERE data_entry_id = %s", [entry_id])
            return
        cursor.execute(
            "INSERT INTO factors_emission (data_entry_id, factor_id, kg_co2e, job_id, computed_at) "
            "VALUES (%s, %s, %s, NULL, %s) ON CONFLICT (data_entry_id) DO UPDATE SET "
            "factor_id = EXCLUDED.factor_id, kg_co2e = EXCLUDED.kg_co2e, job_id = NULL, "
            "computed_at = EXCLUDED.computed_at",
            [entry_id, priced.factor_id, priced.kg_co2e, jobs.now()],
        )
