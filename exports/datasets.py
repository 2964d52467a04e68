"""Conveyor's own data a snapshot can export from its PostgreSQL: each dataset a fixed
query with its tenant filter built in, and the columns it offers with their types.

A mapping entity names a dataset and picks columns; the SQL of its job is written here,
from these definitions and the snapshot's tenant id, never from what a caller sent. A
tenant therefore exports its own rows (and the emission factors, reference data shared by
every tenant) and nothing else, whatever it names, and the export's read-only connection
needs no rights beyond these tables.

The tables are read, never written (each app writes only its own), and by name rather
than through the other apps' models, which this app does not import. A test checks
every dataset against the live schema, so a renamed column fails the suite, not an
export.
"""

from __future__ import annotations

from dataclasses import dataclass

from exports.spec import Column


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    # A SELECT of every column below, in any order, with ``{tenant}`` where the tenant's id
    # goes (an integer, formatted in by ``sql``); without it, data every tenant shares.
    query: str
    columns: tuple[Column, ...]

    def column(self, name: str) -> Column | None:
        return next((column for column in self.columns if column.name == name), None)

    def sql(self, tenant_id: int, names: list[str]) -> str:
        """The query of the chosen columns, in the chosen order, of this tenant's rows."""
        if not isinstance(tenant_id, int) or isinstance(tenant_id, bool):
            raise TypeError("a tenant id is an integer")
        unknown = [name for name in names if self.column(name) is None]
        if unknown:
            raise ValueError(f"dataset {self.name} has no column {unknown[0]!r}")
        picked = ", ".join(f'"{name}"' for name in names)
        return f"SELECT {picked} FROM ({self.query.format(tenant=tenant_id)}) AS {self.name}"

    def types(self, names: list[str]) -> list[str]:
        return [self.column(name).type for name in names]  # type: ignore[union-attr]


_ENTRIES = """
    SELECT e.id, e.data_entry_type, e.year, e.quantity, e.unit, e.classification::text AS
           classification, e.source, m.module_type AS module, r.year AS report_year,
           u.code AS unit_code, e.created_at, e.updated_at
      FROM factors_dataentry e
      JOIN factors_reportmodule m ON m.id = e.module_id
      JOIN factors_carbonreport r ON r.id = m.report_id
      JOIN factors_unit u ON u.id = r.unit_id
     WHERE u.tenant_id = {tenant}"""

DATASETS: dict[str, Dataset] = {
    dataset.name: dataset
    for dataset in (
        Dataset(
            "units",
            "The tenant's organisational units (and their parent unit).",
            "SELECT id, code, name, parent_id, created_at FROM factors_unit WHERE tenant_id = {tenant}",
            (
                Column("id", "bigint"),
                Column("code", "varchar"),
                Column("name", "varchar"),
                Column("parent_id", "bigint"),
                Column("created_at", "timestamp(6) with time zone"),
            ),
        ),
        Dataset(
            "data_entries",
            "The tenant's reported activities, with their module, report and unit.",
            _ENTRIES,
            (
                Column("id", "bigint"),
                Column("data_entry_type", "varchar"),
                Column("year", "integer"),
                Column("quantity", "decimal(18,6)"),
                Column("unit", "varchar"),
                Column("classification", "json"),
                Column("source", "varchar"),
                Column("module", "varchar"),
                Column("report_year", "integer"),
                Column("unit_code", "varchar"),
                Column("created_at", "timestamp(6) with time zone"),
                Column("updated_at", "timestamp(6) with time zone"),
            ),
        ),
        Dataset(
            "emission_factors",
            "The emission factors: reference data every tenant's entries are "
            "computed with, the same for all tenants.",
            """SELECT id, data_entry_type, year, classification::text AS classification, value, unit,
                  source, is_stale, updated_at
             FROM factors_emissionfactor""",
            (
                Column("id", "bigint"),
                Column("data_entry_type", "varchar"),
                Column("year", "integer"),
                Column("classification", "json"),
                Column("value", "decimal(18,9)"),
                Column("unit", "varchar"),
                Column("source", "varchar"),
                Column("is_stale", "boolean"),
                Column("updated_at", "timestamp(6) with time zone"),
            ),
        ),
        Dataset(
            "emissions",
            "Edges from each of the tenant's entries to the factor it was computed with, and the kg CO2e.",
            """SELECT em.data_entry_id, em.factor_id, em.kg_co2e, em.computed_at
             FROM factors_emission em
             JOIN factors_dataentry e ON e.id = em.data_entry_id
             JOIN factors_reportmodule m ON m.id = e.module_id
             JOIN factors_carbonreport r ON r.id = m.report_id
             JOIN factors_unit u ON u.id = r.unit_id
            WHERE u.tenant_id = {tenant}""",
            (
                Column("data_entry_id", "bigint"),
                Column("factor_id", "bigint"),
                Column("kg_co2e", "decimal(20,6)"),
                Column("computed_at", "timestamp(6) with time zone"),
            ),
        ),
        Dataset(
            "daily_bars",
            "The daily bars of the tenant's market feeds.",
            """SELECT f.name AS feed, b.ts_code, b.trade_date, b.open, b.high, b.low, b.close,
                  b.pre_close, b.change, b.pct_chg, b.vol, b.amount
             FROM ingest_dailybar b JOIN ingest_marketfeed f ON f.id = b.feed_id
            WHERE f.tenant_id = {tenant}""",
            (
                Column("feed", "varchar"),
                Column("ts_code", "varchar"),
                Column("trade_date", "date"),
                Column("open", "double"),
                Column("high", "double"),
                Column("low", "double"),
                Column("close", "double"),
                Column("pre_close", "double"),
                Column("change", "double"),
                Column("pct_chg", "double"),
                Column("vol", "double"),
                Column("amount", "double"),
            ),
        ),
    )
}
