"""Records out of one file, read as a stream from where the previous batch stopped.

JSON Lines and CSV are read line by line, never whole, and each record says the byte
position and line just after it: the next batch seeks there instead of reading the
file again from the start, which would make a big file's batches cost its size each.
A ``.json`` file (one array of objects) has to be parsed whole, so it is bounded, and
a batch skips the records already taken by count.

Numbers in JSON keep their exact text, as in the intake (``12.50`` is ``"12.50"``); CSV
gives strings. Anything malformed is a permanent ``SourceError`` naming the file and
its line (or item).
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ingest.runs.errors import SourceError
from intake.http_sources import FetchError, json_document

FORMATS = ("jsonl", "json", "csv")
EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}
CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Mark:
    """A place in a file: records taken before it, and for the streamed formats its byte
    position and the lines read up to it (None: count the records from the start)."""

    offset: int = 0
    position: int | None = 0
    line: int = 0


@dataclass(frozen=True)
class Record:
    value: dict[str, Any]
    size: int  # bytes it took in the file
    after: Mark  # where the next record starts


def format_of(name: str, configured: str | None) -> str:
    if configured:
        return configured
    for extension, known in EXTENSIONS.items():
        if name.lower().endswith(extension):
            return known
    raise SourceError(
        f"{name}: cannot tell its format from its name; set the source's format "
        f"or a pattern that matches only {', '.join(EXTENSIONS)} files",
        transient=False,
    )


def records(handle: BinaryIO, fmt: str, name: str, start: Mark, max_bytes: int) -> Iterator[Record]:
    """The records of ``handle`` (the file ``name``) from ``start`` on; each at most
    ``max_bytes``."""
    if fmt == "json":
        yield from _json(handle, name, start, max_bytes)
        return
    read = _jsonl if fmt == "jsonl" else _csv
    if start.position is None:  # no place to seek to: count from the start
        yield from itertools.islice(read(handle, name, Mark(), max_bytes), start.offset, None)
    else:
        yield from read(handle, name, start, max_bytes)


def malformed(name: str, where: str, problem: str) -> SourceError:
    return SourceError(f"{name}, {where}: {problem}", transient=False)


class Lines:
    """The lines of a binary file from a position on, each with its newline, none over
    ``max_bytes``; ``position`` and ``line`` follow what has been handed out."""

    def __init__(self, handle: BinaryIO, name: str, start: Mark, max_bytes: int) -> None:
        self.handle, self.name, self.max_bytes = handle, name, max_bytes
        self.position = start.position or 0
        self.line = start.line
        if self.position:
            handle.seek(self.position)

    def __iter__(self) -> Iterator[bytes]:
        pending = bytearray()
        scanned = 0
        while chunk := self.handle.read(CHUNK_BYTES):
            pending += chunk
            begin = 0
            while (end := pending.find(b"\n", max(begin, scanned))) >= 0:
                yield self._hand_out(bytes(pending[begin : end + 1]))
                begin = end + 1
            del pending[:begin]
            scanned = len(pending)
            if scanned > self.max_bytes:
                raise malformed(
                    self.name,
                    f"line {self.line + 1}",
                    f"a line longer than the {self.max_bytes} bytes a record may take",
                )
        if pending:
            yield self._hand_out(bytes(pending))

    def _hand_out(self, line: bytes) -> bytes:
        if len(line) > self.max_bytes:
            raise malformed(
                self.name,
                f"line {self.line + 1}",
                f"a line longer than the {self.max_bytes} bytes a record may take",
            )
        self.position += len(line)
        self.line += 1
        return line


def _jsonl(handle: BinaryIO, name: str, start: Mark, max_bytes: int) -> Iterator[Record]:
    lines = Lines(handle, name, start, max_bytes)
    offset = start.offset
    for line in lines:
        if not line.strip():
            continue
        try:
            value = json_document(line)
        except FetchError as exc:
            raise malformed(name, f"line {lines.line}", f"not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise malformed(name, f"line {lines.line}", "not a JSON object")
        offset += 1
        yield Record(value, len(line), Mark(offset, lines.position, lines.line))


def _csv(handle: BinaryIO, name: str, start: Mark, max_bytes: int) -> Iterator[Record]:
    """Objects of strings keyed by the header row. A batch after the first reads the
    header, then seeks to where the previous one stopped."""
    lines = Lines(handle, name, Mark(), max_bytes)
    rows = _csv_rows(lines, name, max_bytes)
    header = next((row for row, _, _ in rows), None)
    if header is None:
        return
    _check_header(header, name)
    if start.position and start.position > lines.position:
        lines = Lines(handle, name, start, max_bytes)
        rows = _csv_rows(lines, name, max_bytes)
    offset = start.offset
    for row, size, first_line in rows:
        if len(row) != len(header):
            raise malformed(
                name, f"line {first_line}", f"{len(row)} fields where the header has {len(header)}"
            )
        offset += 1
        yield Record(dict(zip(header, row, strict=True)), size, Mark(offset, lines.position, lines.line))


def _csv_rows(lines: Lines, name: str, max_bytes: int) -> Iterator[tuple[list[str], int, int]]:
    """Each non-empty row, the bytes it took and the line it began on."""

    def text() -> Iterator[str]:
        for line in lines:
            try:
                yield line.decode("utf-8-sig" if lines.position == len(line) else "utf-8")
            except UnicodeDecodeError as exc:
                raise malformed(name, f"line {lines.line}", f"not UTF-8 ({exc.reason})") from None

    reader = csv.reader(text(), strict=True)
    while True:
        before, first_line = lines.position, lines.line + 1
        try:
            row = next(reader, None)
        except csv.Error as exc:
            raise malformed(name, f"line {first_line}", f"not valid CSV ({exc})") from None
        if row is None:
            return
        size = lines.position - before
        if size > max_bytes:
            raise malformed(
                name, f"line {first_line}", f"a row longer than the {max_bytes} bytes a record may take"
            )
        if row:
            yield row, size, first_line


def _check_header(header: list[str], name: str) -> None:
    if not all(column.strip() for column in header) or len(set(header)) != len(header):
        raise malformed(name, "line 1", "the header row needs a distinct, non-empty name for each column")


def _json(handle: BinaryIO, name: str, start: Mark, max_bytes: int) -> Iterator[Record]:
    body = handle.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise malformed(
            name,
            "the whole file",
            f"over the {max_bytes} bytes a .json file may "
            "take (it is read whole): use JSON Lines for bigger files",
        )
    try:
        items = json_document(body)
    except FetchError as exc:
        raise malformed(name, "the whole file", f"not valid JSON ({exc})") from None
    if not isinstance(items, list):
        raise malformed(name, "the whole file", "not a JSON array of objects")
    for index in range(start.offset, len(items)):
        if not isinstance(items[index], dict):
            raise malformed(name, f"item {index + 1}", "not a JSON object")
        yield Record(items[index], len(json.dumps(items[index]).encode()), Mark(index + 1, None, 0))
