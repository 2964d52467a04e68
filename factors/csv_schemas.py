"""The CSV files the calculator accepts, built from the catalogue: entries and factors of
one data-entry type, and the unit directory."""

from __future__ import annotations

from factors import catalog, conf
from intake.csv_validation import Column, CsvSchema


def entries(data_entry_type: str) -> CsvSchema:
    """``quantity, unit, <classification keys>``, e.g. ``quantity,unit,haul,cabin``."""
    spec = catalog.spec(data_entry_type)
    return CsvSchema(
        label=f"{data_entry_type} entries",
        columns=(Column("quantity", "number", digits=12, decimals=6),
                 Column("unit", "fixed", value=spec.unit),
                 *(Column(key, "code") for key in spec.keys)),
        max_bytes=conf.max_bytes("entries"),
    )


def factors(data_entry_type: str) -> CsvSchema:
    """``year, <classification keys>, value, unit[, source]``; one row per year and
    classification."""
    spec = catalog.spec(data_entry_type)
    return CsvSchema(
        label=f"{data_entry_type} factors",
        columns=(Column("year", "year"),
                 *(Column(key, "code") for key in spec.keys),
                 Column("value", "number", digits=9, decimals=9),
                 Column("unit", "fixed", value=spec.unit),
                 Column("source", "text", required=False, optional_header=True)),
        unique=("year", *spec.keys),
        max_bytes=conf.max_bytes("factors"),
    )


def units() -> CsvSchema:
    """The unit directory: ``code, name[, parent][, tenant]``."""
    return CsvSchema(
        label="unit directory",
        columns=(Column("code", "code"),
                 Column("name", "text"),
                 Column("parent", "code", required=False, optional_header=True),
                 Column("tenant", "code", required=False, optional_header=True)),
        unique=("code",),
        max_bytes=conf.max_bytes("units"),
    )
