"""JSON documents from HTTP sources turned into the CSV rows the validator checks, so
that an API source follows exactly the same rules as an uploaded file."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from factors import catalog
from intake.csv_validation import CsvError, shown


class ShapeError(Exception):
    """The document is not shaped as expected; ``errors`` name the items."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors[:20]))
        self.errors = errors


def items(document: Any, key: str) -> list[Any]:
    """``document`` itself if it is a list, else its ``key`` list."""
    found = document.get(key) if isinstance(document, dict) else document
    if not isinstance(found, list):
        raise ShapeError([f"expected a JSON list, or an object with a {key!r} list"])
    return found


def entries_csv(document: Any, data_entry_type: str) -> bytes:
    """``{"entries": [{"quantity": "12.5", "unit": "km", "classification": {...}}]}``
    (or the bare list) as a CSV file with the entries schema's header."""
    spec = catalog.spec(data_entry_type)
    rows, errors = [], []
    for index, item in enumerate(items(document, "entries")):
        if not isinstance(item, dict):
            errors.append(f"entries[{index}]: expected an object")
            continue
        classification = item.get("classification", {})
        if not isinstance(classification, dict):
            errors.append(f"entries[{index}].classification: expected an object")
            continue
        values = [
            item.get("quantity"),
            item.get("unit", spec.unit),
            *(classification.get(key) for key in spec.keys),
        ]
        rows.append(_cells(values, f"entries[{index}]", errors))
    return _csv(["quantity", "unit", *spec.keys], rows, errors)


def units_csv(document: Any) -> bytes:
    """``{"units": [{"code": "LAB1", "name": "…", "parent": null, "tenant": null}]}``
    (or the bare list) as a CSV file with the unit directory's header."""
    rows, errors = [], []
    for index, item in enumerate(items(document, "units")):
        if not isinstance(item, dict):
            errors.append(f"units[{index}]: expected an object")
            continue
        values = [item.get("code"), item.get("name"), item.get("parent"), item.get("tenant")]
        rows.append(_cells(values, f"units[{index}]", errors))
    return _csv(["code", "name", "parent", "tenant"], rows, errors)


def _cells(values: Sequence[Any], where: str, errors: list[str]) -> list[str]:
    cells = []
    for value in values:
        if isinstance(value, (dict, list, bool)):
            errors.append(f"{where}: {shown(repr(value))} must be a string or a number")
            value = ""
        elif isinstance(value, str) and ("\n" in value or "\r" in value):
            errors.append(f"{where}: {value[:40]!r} contains a line break")
            value = ""
        cells.append("" if value is None else str(value))
    return cells


def _csv(header: list[str], rows: list[list[str]], errors: list[str]) -> bytes:
    if errors:
        raise ShapeError(errors)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode()


def describe(error: CsvError, key: str, first_row: int = 2) -> str:
    """A validator error about the generated CSV, named after the JSON item instead."""
    if error.row is None or error.row < first_row:
        return str(error)
    where = f"{key}[{error.row - first_row}]"
    if error.column:
        where += f".{error.column}"
    return f"{where}: {error.reason}"
