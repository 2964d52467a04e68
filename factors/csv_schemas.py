"""The CSV files the calculator accepts, built from the catalogue: entries and factors of
one data-entry type, and the unit directory; and an example of each entries file, made
from the same columns so that what the upload form shows is what the parser takes."""

from __future__ import annotations

from factors import catalog, conf
from intake.csv_validation import Column, CsvSchema

# A cell of each kind that fits any column of that kind here (codes come from the catalogue).
_EXAMPLE_CELLS = {"number": "120.5", "year": "2024", "text": ""}


def entries(data_entry_type: str) -> CsvSchema:
    """``quantity, unit, <classification keys>``, e.g. ``quantity,unit,haul,cabin``."""
    spec = catalog.spec(data_entry_type)
    return CsvSchema(
        label=f"{data_entry_type} entries",
        columns=(
            Column("quantity", "number", digits=12, decimals=6),
            Column("unit", "fixed", value=spec.unit),
            *(Column(key, "code") for key in spec.keys),
        ),
        max_bytes=conf.max_bytes("entries"),
    )


def factors(data_entry_type: str) -> CsvSchema:
    """``year, <classification keys>, value, unit[, source]``; one row per year and
    classification."""
    spec = catalog.spec(data_entry_type)
    return CsvSchema(
        label=f"{data_entry_type} factors",
        columns=(
            Column("year", "year"),
            *(Column(key, "code") for key in spec.keys),
            Column("value", "number", digits=9, decimals=9),
            Column("unit", "fixed", value=spec.unit),
            Column("source", "text", required=False, optional_header=True),
        ),
        unique=("year", *spec.keys),
        max_bytes=conf.max_bytes("factors"),
    )


def units() -> CsvSchema:
    """The unit directory: ``code, name[, parent][, tenant]``."""
    return CsvSchema(
        label="unit directory",
        columns=(
            Column("code", "code"),
            Column("name", "text"),
            Column("parent", "code", required=False, optional_header=True),
            Column("tenant", "code", required=False, optional_header=True),
        ),
        unique=("code",),
        max_bytes=conf.max_bytes("units"),
    )


def entries_example(data_entry_type: str) -> tuple[str, str]:
    """The header line and one valid row of an entries file of this type, e.g.
    ``("quantity,unit,haul,cabin", "120.5,km,short,economy")``."""
    spec = catalog.spec(data_entry_type)
    schema = entries(data_entry_type)
    codes = dict(zip(spec.keys, spec.example, strict=True))
    return ",".join(schema.names), ",".join(_example_cell(column, codes) for column in schema.columns)


def _example_cell(column: Column, codes: dict[str, str]) -> str:
    if column.kind == "fixed":
        return column.value
    if column.kind == "code":
        return codes[column.name]
    return _EXAMPLE_CELLS[column.kind]
