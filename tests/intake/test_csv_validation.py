"""The streaming CSV validator: clear errors with row, column and reason; the fast path
never accepts what the cell-by-cell checks refuse; canonical rows read back exactly."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intake.csv_validation import MAX_LINE_CHARS, MAX_REPORT_CHARS, Column, CsvSchema, validate

HEADER = ["quantity", "unit", "haul", "cabin"]
# Two schemas of the kind an app declares: measured rows with a fixed unit and two codes,
# and yearly values unique per year and codes.
TRIPS = CsvSchema(
    "trips",
    (
        Column("quantity", "number", digits=12, decimals=6),
        Column("unit", "fixed", value="km"),
        Column("haul", "code"),
        Column("cabin", "code"),
    ),
    max_bytes=100 * 1024 * 1024,
)
RATES = CsvSchema(
    "rates",
    (
        Column("year", "year"),
        Column("haul", "code"),
        Column("cabin", "code"),
        Column("value", "number", digits=9, decimals=9),
        Column("unit", "fixed", value="km"),
        Column("source", "text", required=False, optional_header=True),
    ),
    unique=("year", "haul", "cabin"),
    max_bytes=20 * 1024 * 1024,
)


def csv_bytes(header: list[str], rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode()


def check(body: bytes, schema: CsvSchema | None = None):
    out = io.BytesIO()
    report = validate(io.BytesIO(body), schema or TRIPS, out=out)
    return report, out.getvalue()


def errors(body: bytes) -> list[tuple]:
    report, _ = check(body)
    return [(e.row, e.column, e.reason) for e in report.errors]


def test_a_valid_file_is_counted_and_copied_in_canonical_form():
    body = b'\xef\xbb\xbfQuantity, Unit ,cabin,haul\r\n12.5,KM,economy,short\r\n 7 ,km,"first",long\r\n'

    report, out = check(body)

    assert report.ok and report.rows == 2
    assert report.header == ["quantity", "unit", "cabin", "haul"]
    assert out == b"12.5,KM,economy,short\n7,km,first,long\n"


def test_a_missing_header_is_named():
    [(row, column, reason)] = errors(b"12.5,km,short,economy\n")
    assert (row, column) == (1, None)
    assert reason.startswith("missing header row: the first row must name the columns")


def test_missing_unknown_and_repeated_columns_are_each_named():
    found = errors(b"quantity,unit,haul,haul,colour\n1,km,short,short,red\n")
    assert (1, "haul", "the column appears twice") in found
    assert (1, "colour", "unknown column; expected quantity, unit, haul, cabin") in found
    assert (1, "cabin", "missing column") in found


def test_bad_cells_are_named_by_row_and_column():
    body = csv_bytes(
        HEADER,
        [
            ["1", "km", "short", "economy"],
            ["1,5", "km", "short", "economy"],
            ["2", "miles", "short", "economy"],
            ["3", "km", "", "economy"],
            ["4", "km", "short"],
        ],
    )
    assert errors(body) == [
        (3, "quantity", "not a number ('1,5'): use a dot as the decimal separator"),
        (4, "unit", "must be 'km' (found 'miles')"),
        (5, "haul", "empty: a value is required"),
        (6, None, "expected 4 cells (quantity, unit, haul, cabin), found 3"),
    ]


@pytest.mark.parametrize("cell", ["=1+1", "+33612345678", "-2", "@SUM(A1)", " =cmd|' /C calc'!A0"])
def test_formula_looking_cells_are_refused(cell):
    body = csv_bytes(HEADER, [["1", "km", cell, "economy"]])
    [(row, column, reason)] = errors(body)
    assert (row, column) == (2, "haul")
    assert "look like a spreadsheet formula" in reason


def test_a_file_in_another_encoding_is_refused_at_its_first_bad_byte():
    body = "quantity,unit,haul,cabin\n1,km,short,economy\n2,km,short,économie\n".encode("latin-1")
    [(row, column, reason)] = errors(body)
    assert (row, column) == (3, None)
    assert reason.startswith("not UTF-8: byte 0xe9 cannot be decoded")


def test_blank_lines_and_line_breaks_inside_cells_are_refused():
    found = errors(b'quantity,unit,haul,cabin\n1,km,short,economy\n\n2,km,"sho\nrt",economy\n')
    assert found[0] == (3, None, "empty row: remove blank lines")
    assert found[1][0] == 4 and "cells may not contain line breaks" in found[1][2]


def test_only_the_first_hundred_errors_are_listed_but_all_are_counted():
    body = csv_bytes(HEADER, [["x", "km", "short", "economy"]] * 250)
    report, out = check(body)
    assert (report.error_count, len(report.errors)) == (250, 100)
    assert report.as_dict()["errors_truncated"] is True
    assert out == b""  # nothing of a refused file is kept


def test_a_file_over_the_size_limit_stops_being_read_at_the_limit():
    schema = TRIPS
    small = CsvSchema(schema.label, schema.columns, max_bytes=1024 * 1024)
    source = io.BytesIO(b"quantity,unit,haul,cabin\n" + b"1,km,short,economy\n" * 200_000)

    report = validate(source, small)

    assert [str(e) for e in report.errors] == [
        "file: the file is larger than the 1 MB limit: split it into smaller files"
    ]
    assert source.tell() <= 2 * 1024 * 1024


def test_an_empty_file_and_a_header_only_file_are_refused():
    assert errors(b"") == [(None, None, "the file is empty")]
    assert errors(b"quantity,unit,haul,cabin\n") == [(None, None, "no data rows: the file has a header only")]


def test_unique_columns_refuse_duplicate_keys_whatever_the_case():
    body = csv_bytes(
        ["year", "haul", "cabin", "value", "unit"],
        [["2024", "short", "economy", "0.1", "km"], ["2024", "Short", "ECONOMY", "0.2", "km"]],
    )
    report, _ = check(body, RATES)
    assert [str(e) for e in report.errors] == ["row 3: duplicates row 2: same year, haul, cabin"]


# --- properties ------------------------------------------------------------------------------------

# Cells drawn from characters that matter to CSV and to the rules: separators, quotes,
# spaces, formula prefixes, control characters, digits, dots, letters, accents.
CELL_CHARS = st.sampled_from(list(',"\r\t =+-@._0123456789aZé\x00\x85'))
cells = st.text(CELL_CHARS, max_size=8)
rows = st.lists(
    st.tuples(cells, st.sampled_from(["km", "KM", " km", "mi"]), cells, cells), min_size=1, max_size=20
)


def _file(data: list[tuple[str, ...]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(data)
    return buffer.getvalue().encode()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(rows)
def test_every_row_is_either_accepted_or_has_an_error_naming_it(data):
    report, out = check(_file(data))

    rows_with_errors = {e.row for e in report.errors}
    assert report.rows + len(rows_with_errors) == len(data)
    assert all(e.row is not None and 2 <= e.row <= len(data) + 1 for e in report.errors)
    assert all(e.reason for e in report.errors)
    if report.ok:
        assert report.rows == len(data)
        assert len(out.splitlines()) == len(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(rows)
def test_accepted_rows_read_back_as_their_normalised_cells(data):
    report, out = check(_file(data))
    if not report.ok:
        return
    read_back = list(csv.reader(io.StringIO(out.decode()), strict=True))
    expected = [[cell.strip(" ") for cell in row] for row in data]
    assert read_back == expected
    for row in read_back:
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in row)


@settings(max_examples=300)
@given(st.tuples(cells, cells, cells, cells))
def test_the_fast_path_accepts_nothing_the_cell_checks_refuse(row):
    line = ",".join(row)
    schema = TRIPS
    fast = re.compile(",".join(c.pattern() for c in schema.columns))
    if fast.fullmatch(line):
        checked = [column.check(cell) for column, cell in zip(schema.columns, row, strict=True)]
        assert all(reason is None for _, reason in checked)
        assert [value for value, _ in checked] == list(row)


# --- inputs that are not CSV at all, and reports about huge cells ------------------------


def test_a_one_byte_file_is_refused_as_having_no_header():
    [(row, column, reason)] = errors(b"x")
    assert (row, column) == (1, None)
    assert reason.startswith("missing header row")


def test_a_file_without_a_line_break_in_its_first_megabyte_is_refused_naming_it():
    [(row, column, reason)] = errors(b"x" * (MAX_LINE_CHARS + 10))
    assert (row, column) == (None, None)
    assert reason == (
        "no header line in the first 1 MB: the file has no line break there (is it a CSV file?)"
    )


def test_a_header_of_a_million_columns_is_refused_naming_it():
    [(row, column, reason)] = errors(b",".join([b"quantity"] * 1_000_000) + b"\n1\n")
    assert (row, reason[:32]) == (None, "no header line in the first 1 MB")


def test_a_row_longer_than_the_line_limit_is_named_and_not_checked():
    body = b"quantity,unit,haul,cabin\n1,km,short,economy\n" + b"2" * (MAX_LINE_CHARS + 1)
    [(row, column, reason)] = errors(body)
    assert (row, column) == (3, None)
    assert reason == "the row is longer than 1 MB and was not checked, nor the rows after it"


def test_an_echoed_cell_is_cut_to_a_prefix_with_its_length():
    body = csv_bytes(HEADER, [["9" * 50 + "x" * 999_950, "km", "short", "economy"]])
    [(row, column, reason)] = errors(body)
    assert (row, column) == (2, "quantity")
    assert reason == f"not a number ({'9' * 50 + 'x' * 30!r}… (1,000,000 characters))"


def test_an_unknown_huge_column_name_is_cut_too():
    found = errors(b"quantity,unit,haul,cabin," + b"c" * 5000 + b"\n")
    assert (
        1,
        "c" * 80 + "… (5,000 characters)",
        "unknown column; expected quantity, unit, haul, cabin",
    ) in found


def test_a_report_on_forty_rows_of_megabyte_cells_stays_small():
    big = "x" * 1_000_000
    body = csv_bytes(HEADER, [[big, "km", "short", "economy"]] * 40)

    report, _ = check(body)

    assert report.error_count == 40 and len(report.errors) == 40
    assert len(json.dumps(report.as_dict())) < 10_000


def test_the_listed_errors_stop_at_the_character_cap():
    row = ["y" * 200, "k" * 200, "h" * 200, "c" * 200]
    body = csv_bytes(HEADER, [row] * 99)
    report = validate(io.BytesIO(body), TRIPS, max_errors=1_000)
    listed = sum(len(e.reason) + len(e.column or "") for e in report.errors)
    assert report.error_count == 4 * 99
    assert len(report.errors) < 396 and MAX_REPORT_CHARS - 300 < listed <= MAX_REPORT_CHARS
    assert report.as_dict()["errors_truncated"] is True


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000))
def test_any_bytes_give_a_report_never_an_exception(body):
    report, _ = check(body)
    assert report.ok or report.errors


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_any_bytes_after_a_valid_header_give_a_report_never_an_exception(body):
    report, _ = check(b"quantity,unit,haul,cabin\n" + body)
    assert report.ok or report.errors
