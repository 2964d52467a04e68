"""Large JSON bodies read as they arrive, with bounds on what is built from them.

``json.loads`` of a body of many small items builds about 30 times the body's size in
Python objects (a 30 MB body of ``{}`` items grew a web process by 900 MB) before a view
can count them. ``StreamedJSONParser`` reads the body in 64 kB pieces with an
incremental parser (ijson's C backend) and refuses, before building further:

- a body over ``max_bytes_setting`` bytes (413);
- a value of more than ``max_values`` JSON values (400): the body outside the streamed
  array, and each item of it, is bounded on its own;
- nesting deeper than ``MAX_JSON_DEPTH`` (400);
- a string, key or value, holding a NUL character or a lone surrogate (400), as
  ``BoundedJSONParser`` does.

An endpoint that takes a long array of items (``streamed_field``, a field of the body's
top object) hands each item to ``read_item`` as soon as it is complete and keeps only
what that returns: the items are never all held as objects at once, and
``read_item`` refuses past the endpoint's item bound before the next one is built.
"""

from __future__ import annotations

import codecs
import re
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson
from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser, get_encoding

from jobs.arguments import MAX_JSON_DEPTH

CHUNK_BYTES = 64 * 1024
Event = tuple[str, Any]
# ijson's fastest parser here (its C one, where built), and its pure-Python one for the
# rare body the C one cannot read.
FAST: Any = ijson
EXACT: Any = ijson.get_backend("python")

# One escape of a JSON string: \uXXXX, or a backslash and the character it escapes.
_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONGEST_ESCAPE = 6


class WiderThanFast(Exception):
    """The body holds an integer the C parser cannot hold (beyond 64 bits)."""


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is larger than this endpoint takes."
    default_code = "body_too_large"


class LoneSurrogates:
    """Finds a surrogate escape without its other half in JSON text fed piece by piece.

    ijson's C backend turns ``"\\ud800"`` into ``"?"`` without a word, so the escapes are
    checked in the raw bytes before the parser sees them. Escapes are read left to
    right, so ``\\\\ud800`` (an escaped backslash, then text) is not one. A piece's
    last bytes that may be a cut escape wait for the next piece.
    """

    def __init__(self) -> None:
        self.carry = b""
        self.pending_high = False  # the last escape was a high surrogate ending the carry

    def feed(self, piece: bytes, final: bool = False) -> None:
        data = self.carry + piece
        keep = len(data) if final else _escape_boundary(data)
        if self.pending_high or _SURROGATE_ESCAPE.search(data):
            keep = self._scan(data, keep)
        if final and self.pending_high:
            raise _lone()
        self.carry = data[keep:]

    def _scan(self, data: bytes, keep: int) -> int:
        """Checks the escapes starting before ``keep``; returns where the carry starts."""
        end = 0
        for match in _ESCAPE.finditer(data):
            if match.start() >= keep:
                break
            unit = int(match.group(1), 16) if match.group(1) else None
            if self.pending_high:
                if match.start() != end or unit is None or not 0xDC00 <= unit <= 0xDFFF:
                    raise _lone()
                self.pending_high = False
            elif unit is not None and 0xDC00 <= unit <= 0xDFFF:
                raise _lone()
            elif unit is not None and 0xD800 <= unit <= 0xDBFF:
                self.pending_high = True
            end = match.end()
        start = max(keep, end)
        if self.pending_high and start != end:
            raise _lone()  # something other than an escape follows the high half
        return start


def _escape_boundary(data: bytes) -> int:
    """Where the carry of a piece starts: its last few bytes, and the backslash before
    them if it begins an escape. That depends on the run of backslashes it ends: pairs
    (``\\\\``) are whole escapes and stay behind, so the carry never grows past a few
    bytes, whatever the body (one of backslashes alone would otherwise make it grow)."""
    at = max(0, len(data) - _LONGEST_ESCAPE)
    run = at - len(data[:at].rstrip(b"\\"))
    return at - run % 2


def _lone() -> ParseError:
    return ParseError(
        "JSON parse error - a string holds a lone surrogate (a \\ud800–\\udfff "
        "escape without its other half), which is not Unicode text"
    )


class BoundedReader:
    """The request's body as a file for ijson: counts its bytes (413 past ``limit``) and
    checks its surrogate escapes on the way."""

    def __init__(self, stream: Any, limit: int, setting: str, copy: BinaryIO | None = None) -> None:
        self.stream, self.limit, self.setting = stream, limit, setting
        self.copy = copy  # where what was read is kept, for a second parse
        self.read_bytes = 0
        self.surrogates = LoneSurrogates()

    def read(self, size: int = CHUNK_BYTES) -> bytes:
        piece = self.stream.read(min(size, CHUNK_BYTES)) if self.stream is not None else b""
        self.read_bytes += len(piece)
        if self.read_bytes > self.limit:
            raise BodyTooLarge(
                f"the body is over {self.limit:,} bytes, the limit of this endpoint ({self.setting})"
            )
        self.surrogates.feed(piece, final=not piece)
        if self.copy is not None:
            self.copy.write(piece)
        return piece

    def read_rest(self) -> None:
        while self.read():
            pass


class Builder:
    """Builds JSON values from parser events, refusing past ``max_values`` values in all
    it builds, or ``MAX_JSON_DEPTH`` levels, or with a NUL character in a string."""

    def __init__(self, max_values: int, what: str) -> None:
        self.max_values, self.what = max_values, what
        self.count = 0

    def counted(self) -> None:
        self.count += 1
        if self.count > self.max_values:
            raise ParseError(
                f"JSON parse error - {self.what} holds more than "
                f"{self.max_values:,} values, the limit of this endpoint"
            )

    def build(self, events: Iterator[Event], event: str, value: Any) -> Any:
        self.counted()
        if event not in ("start_map", "start_array"):
            return self.scalar(value)
        root: Any = {} if event == "start_map" else []
        stack: list[Any] = [root]
        keys: list[str] = [""]
        for event, value in events:
            if event == "map_key":
                keys[-1] = self.scalar(value)
                continue
            if event in ("end_map", "end_array"):
                stack.pop()
                keys.pop()
                if not stack:
                    return root
                continue
            self.counted()
            child = (
                self.scalar(value)
                if event not in ("start_map", "start_array")
                else ({} if event == "start_map" else [])
            )
            parent = stack[-1]
            if isinstance(parent, dict):
                parent[keys[-1]] = child
            else:
                parent.append(child)
            if isinstance(child, dict | list):
                if len(stack) >= MAX_JSON_DEPTH:
                    raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
                stack.append(child)
                keys.append("")
        raise ParseError("JSON parse error - the body ends inside a value")

    def scalar(self, value: Any) -> Any:
        if isinstance(value, str) and "\x00" in value:
            raise ParseError(
                f"JSON parse error - a string in {self.what} holds a NUL character "
                "(\\u0000), which cannot be stored"
            )
        return value


class StreamedJSONParser(BaseParser):
    """JSON read as it arrives (see the module docstring). Subclasses name the setting of
    their byte bound (which should be the web server's limit for the endpoint's view,
    its ``intake.uploads.body_limit``), and may stream one top-level array field item by item."""

    media_type = "application/json"
    max_bytes_setting: str
    max_values = 100_000
    streamed_field: str | None = None

    def read_item(self, index: int, item: Any) -> Any:
        """What is kept of the streamed array's item at ``index`` (raise an APIException
        to refuse it, or to refuse an index past the endpoint's bound)."""
        return item

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None
    ) -> Any:
        encoding = get_encoding(parser_context or {})
        if codecs.lookup(encoding).name != "utf-8":
            raise ParseError(f"JSON parse error - this endpoint reads UTF-8 only, not {encoding}")
        limit = int(getattr(settings, self.max_bytes_setting))
        with tempfile.SpooledTemporaryFile(settings.FILE_UPLOAD_MAX_MEMORY_SIZE) as copy:
            reader = BoundedReader(stream, limit, self.max_bytes_setting, copy)
            try:
                return self._parsed(reader, FAST)
            except WiderThanFast:
                # The C parser stops at an integer beyond 64 bits, which JSON and PostgreSQL
                # both allow: parse the body again, kept as it was read, in pure Python.
                reader.read_rest()
                copy.seek(0)
                return self._parsed(BoundedReader(copy, limit, self.max_bytes_setting), EXACT)

    def _parsed(self, reader: BoundedReader, backend: Any) -> Any:
        events = backend.basic_parse(reader, use_float=True, buf_size=CHUNK_BYTES)
        try:
            data = self._document(events)
            for _ in events:  # the parser's end: trailing text is an error here
                raise ParseError("JSON parse error - text after the JSON value")
        except ijson.JSONError as exc:
            if backend is FAST and "integer overflow" in str(exc):
                raise WiderThanFast from None
            raise ParseError(f"JSON parse error - {str(exc).splitlines()[0]}") from None
        except UnicodeDecodeError:
            raise ParseError(
                "JSON parse error - the body is not UTF-8, or a string holds a lone "
                "surrogate (a \\udc00–\\udfff escape)"
            ) from None
        return data

    def _document(self, events: Iterator[Event]) -> Any:
        try:
            event, value = next(events)
        except StopIteration:
            raise ParseError("JSON parse error - the body is empty") from None
        rest = Builder(self.max_values, "the body")
        if event != "start_map" or self.streamed_field is None:
            return rest.build(events, event, value)
        document: dict[str, Any] = {}
        for event, value in events:
            if event == "end_map":
                return document
            key = rest.scalar(value)
            rest.counted()
            event, value = next(events, ("", None))
            if key == self.streamed_field and event == "start_array":
                document[key] = self._items(events)
            else:
                document[key] = rest.build(events, event, value)
        raise ParseError("JSON parse error - the body ends inside a value")

    def _items(self, events: Iterator[Event]) -> list[Any]:
        items: list[Any] = []
        for event, value in events:
            if event == "end_array":
                return items
            where = f"{self.streamed_field}[{len(items)}]"
            items.append(
                self.read_item(len(items), Builder(self.max_values, where).build(events, event, value))
            )
        raise ParseError("JSON parse error - the body ends inside a value")
