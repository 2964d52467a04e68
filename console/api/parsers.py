"""Request bodies the API accepts: JSON of bounded depth, and objects where fields are read.

Python's JSON decoder recurses once per nesting level, so a body of a few thousand ``[``
raised RecursionError inside the parser (a 500, and a deep stack for anyone to ask for).
``BoundedJSONParser`` measures the depth before decoding and refuses a deeper body with a
400; every JSON endpoint uses it (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]`` and the
views that name their parsers). It also refuses strings, keys included, at any depth,
holding a NUL character (``\\u0000``) or a lone surrogate (``\\ud800`` with no low half):
PostgreSQL stores neither in text or jsonb, so such a body would otherwise fail at the
INSERT (a 500). ``StreamedJSONParser`` (console/api/streaming.py) reads large bodies
as they arrive, with the same rules and bounds on what it builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.request import Request
from rest_framework.utils import json

from jobs.arguments import MAX_JSON_DEPTH, json_depth, may_not_store, stored_text_problem


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser that refuses bodies nested deeper than ``MAX_JSON_DEPTH``."""

    max_depth = MAX_JSON_DEPTH

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None
    ) -> Any:
        encoding = get_encoding(parser_context or {})  # refuses non-text codecs (bz2 …)
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding}: {exc}") from None
        if json_depth(text) > self.max_depth:
            raise ParseError(f"JSON parse error - nested deeper than {self.max_depth} levels")
        parse_constant = json.strict_constant if self.strict else None
        try:
            data = json.loads(text, parse_constant=parse_constant)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        if "\\u0000" in text and holds_nul(data):
            raise ParseError(
                "JSON parse error - a string holds a NUL character (\\u0000), which cannot be stored"
            )
        if may_not_store(text):
            problem = stored_text_problem(data, "body")
            if problem:
                raise ParseError(f"JSON parse error - {problem}")
        return data


def holds_nul(data: Any) -> bool:
    """Whether any string (key or value) in decoded JSON holds a NUL character, which
    PostgreSQL cannot store. Recursive: callers pass JSON of bounded depth only."""
    if isinstance(data, str):
        return "\x00" in data
    if isinstance(data, dict):
        return any(holds_nul(key) or holds_nul(value) for key, value in data.items())
    if isinstance(data, list):
        return any(holds_nul(item) for item in data)
    return False


def object_body(request: Request) -> Mapping[str, Any]:
    """The request's fields: a JSON object or a form. A JSON array, string or number is a
    400 rather than an AttributeError in the view that reads fields from it."""
    data = request.data
    if not isinstance(data, Mapping):
        raise ValidationError(
            {"non_field_errors": [f"the body must be a JSON object, got {_json_type(data)}"]}
        )
    return data


def _json_type(value: Any) -> str:
    names = {
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
