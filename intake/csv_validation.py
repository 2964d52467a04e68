"""Streaming validation of uploaded CSV files against a schema: the header, every row, the
encoding, the size, formula-looking cells. Nothing is kept in memory but the first
errors. The schemas (which columns a kind of file has) belong to the apps that accept
the files; this module only knows the kinds of cells.

A file is read in chunks of bytes, decoded as strict UTF-8 and cut into lines. Each line
is first tried against one compiled regular expression for a whole row of plain cells
(no quotes, no surrounding spaces): the common case costs one C call per row. A line
that does not match is parsed and checked cell by cell, which gives the reason of each
error (row, column, reason). The fast path only ever accepts rows the cell-by-cell
checks accept too (a property the tests check with Hypothesis).

While validating, the data rows are written to ``out`` in a canonical form that
PostgreSQL's ``COPY … (FORMAT csv)`` reads back exactly: UTF-8 without a byte-order mark,
``\\n`` line endings, columns in the order of the file's header, surrounding spaces
removed. A file with any error is refused whole: callers throw ``out`` away.

Rules: a cell may not contain a line break or another control character; a cell that
starts with ``=``, ``+``, ``-`` or ``@`` is refused (spreadsheets run it as a formula:
CSV injection); blank lines are errors, so that row numbers are the spreadsheet's own
(the header is row 1); no line is longer than ``MAX_LINE_CHARS``.

The report stays small whatever the file: an echoed value is cut to its first
``SHOWN_CHARS`` characters, and the listed errors stop at ``MAX_ERRORS`` or
``MAX_REPORT_CHARS`` characters (``error_count`` still counts them all).
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol, TypedDict

CHUNK_BYTES = 1 << 20
MB = 1024 * 1024
MAX_ERRORS = 100
MAX_REPORT_CHARS = 20_000
SHOWN_CHARS = 80
# Far above any valid row (a dozen short cells); a file without line breaks (not CSV,
# or a header of a million columns) is refused after this much, not held in memory.
MAX_LINE_CHARS = MB
FORMULA_PREFIXES = ("=", "+", "-", "@")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
CODE_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.\- ]{0,62}[A-Za-z0-9_.\-])?")
YEAR_RE = re.compile(r"\d{4}")
# A plain text cell for the fast path: no quote, comma, control character or surrounding
# space, no formula prefix (the cell-by-cell checks accept all of these and more).
PLAIN_TEXT = r"[^\x00-\x20\",=+\-@\x7f-\x9f](?:[^\x00-\x1f\",\x7f-\x9f]{0,%d}[^\x00-\x20\",\x7f-\x9f])?"


def shown(value: str) -> str:
    """``value`` quoted for an error message, cut to ``SHOWN_CHARS`` characters with an
    ellipsis and its length: a report echoes what was wrong, not megabytes of it."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}… ({len(value):,} characters)"


def shown_name(name: str) -> str:
    """A header name as an error's ``column``, cut like ``shown`` but unquoted."""
    return name if len(name) <= SHOWN_CHARS else f"{name[:SHOWN_CHARS]}… ({len(name):,} characters)"


class Writable(Protocol):
    """Where canonical rows go: an open binary file, or anything with its ``write``."""

    def write(self, data: bytes, /) -> object: ...


class CsvErrorDict(TypedDict):
    row: int | None
    column: str | None
    reason: str


@dataclass(frozen=True)
class CsvError:
    """One problem: ``row`` is the spreadsheet row (header = 1), None for the whole file;
    ``column`` the header name, None for the whole row."""

    row: int | None
    column: str | None
    reason: str

    def as_dict(self) -> CsvErrorDict:
        return {"row": self.row, "column": self.column, "reason": self.reason}

    def __str__(self) -> str:
        where = "file" if self.row is None else f"row {self.row}"
        if self.column:
            where += f", column {self.column}"
        return f"{where}: {self.reason}"


# --- columns and schemas ------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A column of a schema and the rule its cells follow.

    ``kind``: ``number`` (non-negative decimal, ``digits`` before and ``decimals`` after
    the dot), ``code`` (letters, digits, ``_ - .`` and inner spaces; compared in lower
    case), ``text`` (free text up to ``max_length``), ``year``, or ``fixed`` (must equal
    ``value``, case-insensitively: a unit of measure).
    """

    name: str
    kind: str
    required: bool = True
    optional_header: bool = False
    digits: int = 12
    decimals: int = 6
    max_length: int = 200
    value: str = ""

    def pattern(self) -> str:
        """The fast path's regular expression for a plain, already normalised cell."""
        if self.kind == "number":
            body = rf"\d{{1,{self.digits}}}(?:\.\d{{1,{self.decimals}}})?"
        elif self.kind == "code":
            body = CODE_RE.pattern
        elif self.kind == "text":
            body = PLAIN_TEXT % (self.max_length - 2)
        elif self.kind == "year":
            body = r"20\d\d|2100"
        else:
            body = "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in self.value)
        return f"(?:{body})" if self.required else f"(?:{body})?"

    def check(self, cell: str) -> tuple[str, str | None]:
        """The normalised value of ``cell`` and the reason it is refused (None: valid)."""
        value = cell.strip(" ")
        if not value:
            return value, "empty: a value is required" if self.required else None
        if value.startswith(FORMULA_PREFIXES):
            return value, (
                f"starts with {value[0]!r}: cells that look like a spreadsheet formula are refused"
            )
        if CONTROL_RE.search(value):
            return value, "contains a control character (tab, line break …)"
        return value, _KIND_CHECKS[self.kind](self, value)


def _check_number(column: Column, value: str) -> str | None:
    integer, dot, fraction = value.partition(".")
    if not (integer.isascii() and integer.isdigit()) or (
        dot and not (fraction.isascii() and fraction.isdigit())
    ):
        if "," in value:
            return f"not a number ({shown(value)}): use a dot as the decimal separator"
        return f"not a number ({shown(value)})"
    if len(integer) > column.digits:
        return f"too large: at most {column.digits} digits before the decimal point"
    if len(fraction) > column.decimals:
        return f"too precise: at most {column.decimals} decimals"
    return None


def _check_code(column: Column, value: str) -> str | None:
    if CODE_RE.fullmatch(value):
        return None
    return (
        f"{shown(value)} is not a code: letters, digits, '_', '-', '.' and inner spaces only, "
        "at most 64 characters"
    )


def _check_text(column: Column, value: str) -> str | None:
    if len(value) > column.max_length:
        return f"longer than {column.max_length} characters"
    return None


def _check_year(column: Column, value: str) -> str | None:
    if YEAR_RE.fullmatch(value) and 2000 <= int(value) <= 2100:
        return None
    return f"not a year between 2000 and 2100 ({shown(value)})"


def _check_fixed(column: Column, value: str) -> str | None:
    if value.isascii() and value.lower() == column.value:
        return None
    return f"must be {column.value!r} (found {shown(value)})"


_KIND_CHECKS: dict[str, Callable[[Column, str], str | None]] = {
    "number": _check_number,
    "code": _check_code,
    "text": _check_text,
    "year": _check_year,
    "fixed": _check_fixed,
}


@dataclass(frozen=True)
class CsvSchema:
    """The columns a kind of file must have (any order), and which must be unique together."""

    label: str
    columns: tuple[Column, ...]
    unique: tuple[str, ...] = ()
    max_bytes: int = 100 * 1024 * 1024

    @property
    def names(self) -> list[str]:
        return [column.name for column in self.columns]

    def column(self, name: str) -> Column:
        return next(column for column in self.columns if column.name == name)


# --- the report ------------------------------------------------------------------------------


@dataclass
class ValidationReport:
    """The outcome of one pass: the header as found, the valid data rows (``rows``), every
    data row checked, valid or not (``checked``), the first errors."""

    rows: int = 0
    checked: int = 0
    header: list[str] = field(default_factory=list)
    errors: list[CsvError] = field(default_factory=list)
    error_count: int = 0
    listed_chars: int = 0

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def add(self, error: CsvError, limit: int = MAX_ERRORS) -> None:
        self.error_count += 1
        size = len(error.reason) + len(error.column or "")
        if len(self.errors) < limit and self.listed_chars + size <= MAX_REPORT_CHARS:
            self.errors.append(error)
            self.listed_chars += size

    def summary(self) -> str:
        if self.ok:
            return f"{self.rows} valid rows"
        shown = "; ".join(str(error) for error in self.errors[:3])
        more = self.error_count - min(len(self.errors), 3)
        return f"{self.error_count} error(s): {shown}" + (f"; and {more} more" if more > 0 else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "error_count": self.error_count,
            "errors": [error.as_dict() for error in self.errors],
            "errors_truncated": self.error_count > len(self.errors),
        }


# --- the pass ----------------------------------------------------------------------------------


def validate(
    source: BinaryIO, schema: CsvSchema, *, out: Writable | None = None, max_errors: int = MAX_ERRORS
) -> ValidationReport:
    """Validate the CSV file ``source`` against ``schema`` in one streaming pass.

    Writes the canonical data rows to ``out`` while no error has been found; the caller
    discards ``out`` unless the report is ``ok``.
    """
    checker = _Pass(schema, out, max_errors)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    pending, read = "", 0
    while chunk := source.read(CHUNK_BYTES):
        read += len(chunk)
        if read > schema.max_bytes:
            checker.report.add(CsvError(None, None, too_large(schema.max_bytes)))
            return checker.report
        try:
            text = pending + decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            checker.encoding_error(exc)
            return checker.report
        cut = text.rfind("\n") + 1
        pending = text[cut:]
        checker.feed(text[:cut])
        if len(pending) > MAX_LINE_CHARS:
            checker.line_too_long()
            return checker.report
    try:
        pending += decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        checker.encoding_error(exc)
        return checker.report
    if pending:
        checker.feed(pending + "\n")
    return checker.finish()


def human(size: int) -> str:
    """``104857600`` → ``"100 MB"``; below a megabyte, in kB."""
    return f"{size // MB} MB" if size >= MB else f"{max(size // 1024, 1)} kB"


def too_large(limit: int) -> str:
    """The reason a file over ``limit`` bytes is refused, the same whether it is refused
    before reading (its size is known) or once that many bytes were read."""
    return f"the file is larger than the {human(limit)} limit: split it into smaller files"


class _Pass:
    def __init__(self, schema: CsvSchema, out: Writable | None, max_errors: int) -> None:
        self.schema = schema
        self.out = out
        self.max_errors = max_errors
        self.report = ValidationReport()
        self.line = 0  # the physical row number of the last line seen
        self.columns: list[Column] | None = None
        self.fast: re.Pattern[str] | None = None
        self.seen: dict[tuple[str, ...], int] = {}
        self.key_positions: list[int] = []

    def error(self, row: int | None, column: str | None, reason: str) -> None:
        self.report.add(CsvError(row, column, reason), self.max_errors)

    def encoding_error(self, exc: UnicodeDecodeError) -> None:
        row = self.line + exc.object[: exc.start].count(b"\n") + 1
        byte = exc.object[exc.start]
        self.error(
            row,
            None,
            f"not UTF-8: byte 0x{byte:02x} cannot be decoded; save the file "
            'as UTF-8 ("CSV UTF-8" in spreadsheets). Rows after it were '
            "not checked.",
        )

    def line_too_long(self) -> None:
        limit = f"{MAX_LINE_CHARS // MB} MB" if MAX_LINE_CHARS >= MB else f"{MAX_LINE_CHARS:,} characters"
        if self.columns is None:
            self.error(
                None,
                None,
                f"no header line in the first {limit}: the file has no line break there (is it a CSV file?)",
            )
        elif self.columns:  # (an empty list: the header was refused, nothing is checked)
            self.error(
                self.line + 1,
                None,
                f"the row is longer than {limit} and was not checked, nor the rows after it",
            )

    def finish(self) -> ValidationReport:
        if self.columns is None and self.report.ok:
            self.error(None, None, "the file is empty")
        elif self.report.ok and self.report.rows == 0:
            self.error(None, None, "no data rows: the file has a header only")
        return self.report

    # -- lines -----------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        """Check complete lines (``text`` ends with a line break)."""
        text = text.replace("\r\n", "\n")
        lines = text.split("\n")
        lines.pop()
        if not lines:
            return
        if self.columns is None:
            if self.line == 0 and lines[0].startswith("\ufeff"):
                lines[0] = lines[0][1:]
            self.line += 1
            if not self._header(lines[0]):
                self.columns = []  # header refused: count lines, check nothing more
            lines = lines[1:]
        if not self.columns:
            self.line += len(lines)
            return
        if self.fast is not None and not self.key_positions and all(map(self.fast.fullmatch, lines)):
            # The common case: every line plain and valid, checked without a Python frame
            # per line, and already canonical.
            self.line += len(lines)
            self.report.rows += len(lines)
            self.report.checked += len(lines)
            canonical = lines
        else:
            canonical = [self._line(line) for line in lines]
        if self.out is not None and self.report.ok and canonical:
            self.out.write(("\n".join(canonical) + "\n").encode())

    def _line(self, line: str) -> str:
        self.line += 1
        self.report.checked += 1
        if self.fast is not None and self.fast.fullmatch(line):
            if self.key_positions:
                self._unique(line.split(","))
            self.report.rows += 1
            return line
        values = self._slow(line.removesuffix("\r"))
        if values is None:
            return ""
        self.report.rows += 1
        return _csv_line(values)

    def _slow(self, line: str) -> list[str] | None:
        """Parse and check one line cell by cell; its normalised values, or None."""
        assert self.columns is not None
        if not line.strip(" ,"):
            self.error(self.line, None, "empty row: remove blank lines")
            return None
        cells = _cells(line)
        if isinstance(cells, str):
            self.error(self.line, None, cells)
            return None
        if len(cells) != len(self.columns):
            self.error(
                self.line,
                None,
                f"expected {len(self.columns)} cells "
                f"({', '.join(c.name for c in self.columns)}), "
                f"found {len(cells)}",
            )
            return None
        values, errors = [], self.report.error_count
        for column, cell in zip(self.columns, cells, strict=True):
            value, reason = column.check(cell)
            if reason:
                self.error(self.line, column.name, reason)
            values.append(value)
        if self.report.error_count != errors:
            return None
        if self.key_positions:
            self._unique(values)
        return values

    def _unique(self, values: list[str]) -> None:
        key = tuple(values[i].lower() for i in self.key_positions)
        first = self.seen.setdefault(key, self.line)
        if first != self.line:
            self.error(self.line, None, f"duplicates row {first}: same {', '.join(self.schema.unique)}")

    # -- header ------------------------------------------------------------------------------

    def _header(self, line: str) -> bool:
        cells = _cells(line)
        if isinstance(cells, str):
            self.error(1, None, f"the header row is not valid CSV: {cells}")
            return False
        names = [cell.strip(" ").lower() for cell in cells]
        self.report.header = names
        expected = self.schema.names
        if not any(name in expected for name in names):
            self.error(
                1,
                None,
                "missing header row: the first row must name the columns "
                f"({', '.join(expected)}); found {shown(', '.join(cells))}",
            )
            return False
        ok = self._header_names(names, expected)
        if ok:
            self.columns = [self.schema.column(name) for name in names]
            self.fast = re.compile(",".join(column.pattern() for column in self.columns))
            self.key_positions = [names.index(name) for name in self.schema.unique]
        return ok

    def _header_names(self, names: list[str], expected: list[str]) -> bool:
        count = self.report.error_count
        seen: set[str] = set()
        for position, name in enumerate(names):
            if name not in expected:
                self.error(
                    1,
                    shown_name(name) or f"#{position + 1}",
                    f"unknown column; expected {', '.join(expected)}",
                )
            elif name in seen:
                self.error(1, name, "the column appears twice")
            seen.add(name)
        for column in self.schema.columns:
            if column.name not in names and not column.optional_header:
                self.error(1, column.name, "missing column")
        return self.report.error_count == count


def _cells(line: str) -> list[str] | str:
    """The cells of one line, or the reason it is not valid CSV."""
    if '"' not in line:
        return line.split(",")
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error as exc:
        return f"malformed CSV ({exc}); cells may not contain line breaks"
    return rows[0] if rows else []


def _csv_line(values: Iterable[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(values)
    return buffer.getvalue()
