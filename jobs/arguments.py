"""What enqueue accepts: every argument is checked before anything reaches the database.

A job row is read long after the call that wrote it (by a worker, the admin, the API),
so the engine stores exactly what it was given or refuses the call with
``jobs.InvalidArgument`` (``jobs.InvalidPayload`` for a payload), whose message starts
with the argument's name and says what is wrong with its value. Nothing is converted on
the way: a naive datetime is not taken as UTC, an integer key is not made a string, an
empty queue does not fall back to the handler's, ``0`` is not an empty payload. ``None``
always means "the default". Two conversions keep the value: a ``run_after`` is stored
as the same instant in UTC, and a tuple in a payload as a JSON array.

These checks run on every enqueue, so the common case costs a few type tests and, for a
payload, one ``json.dumps`` and a ``json.loads`` (both in C) with scans of the text; the
payload is walked in Python only when its text shows something to look for. The depth
measure, ``json_depth``, also bounds the API's request bodies.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import accumulate
from typing import Any

from django.db import connection, models

from jobs.errors import InvalidArgument, InvalidPayload

# How deeply nested JSON may be, in a payload and in an API request body: deeper than any
# payload a handler takes, far below the interpreter's recursion limit.
MAX_JSON_DEPTH = 64

# A JSON string (escapes included), so that brackets inside strings are not counted. The
# closing quote is optional: a string left open runs to the end of the body (as it does
# for the decoder, which fails there without nesting further), and every quote is matched
# at its first try. With the quote required, each ``"`` of a body like ``"\"\"\"…`` would
# scan to the end and fail: quadratic, an hour of CPU for one megabyte.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__


def json_depth(text: str) -> int:
    """The deepest bracket nesting of ``text`` outside strings (the nesting of valid JSON;
    for invalid JSON an estimate that the decoder never exceeds). Runs in C loops: the
    body is never walked one Python step per character."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP, brackets)), default=0)


# As deep as the API lets a request body be (a 5,000-deep payload is refused here, not by
# a RecursionError in the encoder).
MAX_PAYLOAD_DEPTH = MAX_JSON_DEPTH

SMALLINT = (-(2**15), 2**15 - 1)
POSITIVE_INTEGER_MAX = 2**31 - 1

# Compact, and with non-ASCII text kept as is: a lone surrogate then fails the UTF-8
# encoding below instead of hiding in a \\udXXX escape that PostgreSQL refuses later.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def payload(value: Any, argument: str = "payload", *, max_depth: int = MAX_PAYLOAD_DEPTH) -> str:
    """``value`` as JSON text that PostgreSQL stores and gives back unchanged, or
    ``InvalidPayload``: a dict of JSON values, at most ``max_depth`` levels deep, with no
    NaN or Infinity, and no NUL character or lone surrogate in any string or key."""
    if not isinstance(value, dict):
        raise InvalidPayload(f"{argument} must be a JSON object (a dict), got {describe(value)}", argument)
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise InvalidPayload(f"{argument} is nested deeper than {max_depth} levels", argument) from None
    except ValueError as exc:
        raise InvalidPayload(_unencodable(value, argument, exc), argument) from None
    except TypeError as exc:
        raise InvalidPayload(f"{argument} holds a value JSON cannot store: {exc}", argument) from None
    objects = text.count("{")
    if objects + text.count("[") > max_depth and json_depth(text) > max_depth:
        raise InvalidPayload(f"{argument} is nested deeper than {max_depth} levels", argument)
    if "\\u0000" in text or not _is_utf8(text) or not _keys_survive(value, text, objects):
        # Something may not survive the trip (a literal "\\u0000" or a tuple is fine):
        # find it, or accept the payload.
        problem = _first_problem(value, argument)
        if problem:
            raise InvalidPayload(problem, argument)
    return text


def storable_json(value: Any, argument: str) -> str:
    """``value``, a JSON object from outside Conveyor (a source's record), as compact JSON
    text that PostgreSQL's jsonb stores and gives back unchanged; ``InvalidPayload``
    naming ``argument`` and what is wrong otherwise (a lone surrogate, a NUL character,
    NaN, nesting past the bound), so that such a value is refused where it arrives, not
    in a later statement that cannot say which it was."""
    return payload(value, argument)


def run_after(value: Any) -> datetime:
    """An aware datetime, as the same instant in UTC (PostgreSQL refuses UTC offsets
    beyond ±15:59, which Python allows)."""
    if not isinstance(value, datetime):
        hint = " (for a delay, pass jobs.clock.now() + the delay)" if isinstance(value, timedelta) else ""
        raise InvalidArgument(
            "run_after", f"run_after must be an aware datetime, got {describe(value)}{hint}"
        )
    if value.utcoffset() is None:
        raise InvalidArgument(
            "run_after",
            f"run_after {value.isoformat()} is a naive datetime; "
            "give it a time zone (it is not assumed to be UTC)",
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidArgument("run_after", f"run_after {value.isoformat()} is out of range in UTC") from None


def integer(argument: str, value: Any, low: int, high: int, *, meaning: str = "") -> int:
    """An int (not a bool) within ``low``..``high``."""
    if not _is_int(value):
        raise InvalidArgument(argument, f"{argument} must be an integer, got {describe(value)}")
    if not low <= value <= high:
        raise InvalidArgument(argument, f"{argument} {value} is outside {low}..{high}{meaning}")
    return int(value)


def priority(value: Any) -> int:
    return integer("priority", value, *SMALLINT, meaning=" (a smallint)")


def max_attempts(value: Any) -> int:
    if _is_int(value) and value < 1:
        raise InvalidArgument(
            "max_attempts", f"max_attempts must be at least 1, got {value} (None means the handler's default)"
        )
    return integer("max_attempts", value, 1, POSITIVE_INTEGER_MAX)


def text(argument: str, value: Any, max_length: int, *, none_means: str) -> str:
    """A non-empty string of at most ``max_length`` characters that PostgreSQL can store."""
    if not isinstance(value, str):
        raise InvalidArgument(argument, f"{argument} must be a string, got {describe(value)}")
    if not value:
        raise InvalidArgument(argument, f"{argument} must not be empty (None means {none_means})")
    if len(value) > max_length:
        raise InvalidArgument(
            argument, f"{argument} is {len(value)} characters long; at most {max_length} fit"
        )
    problem = _string_problem(value)
    if problem:
        raise InvalidArgument(argument, f"{argument} {problem}")
    return value


def key(argument: str, value: Any, max_length: int) -> str | None:
    """A job's key: None (no key) or a string that ``text`` accepts."""
    return None if value is None else text(argument, value, max_length, none_means="no key")


def pipeline(value: Any) -> str | None:
    """A UUID, or the text of one; returned in its canonical text."""
    if value is None or isinstance(value, uuid.UUID):
        return None if value is None else str(value)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise InvalidArgument("pipeline", f"pipeline must be a UUID, got {describe(value)}")


def reference(
    argument: str, value: Any, model: type[models.Model], *, anonymous_is_none: bool = False
) -> int | None:
    """The id of the ``model`` row that ``value`` names: an instance or an id (an integer
    primary key). Whether it exists is for the database to say (``jobs.sql.insert_jobs``
    checks it); one that no row can have is refused here."""
    if value is None:
        return None
    anonymous = not isinstance(value, models.Model) and getattr(value, "is_anonymous", False) is True
    if anonymous_is_none and anonymous:
        return None  # the user of a request nobody logged in to
    return _reference(argument, value, model)


def _reference(argument: str, value: Any, model: type[models.Model]) -> int:
    """``reference`` of something other than None."""
    if isinstance(value, models.Model):
        if not isinstance(value, model):
            raise _not_a(argument, value, model)
        if value.pk is None:
            raise InvalidArgument(argument, f"{argument} is an unsaved {model._meta.verbose_name}")
        value = value.pk
    if not _is_int(value):
        raise _not_a(argument, value, model)
    if not 1 <= value <= _largest_id(model):
        raise InvalidArgument(argument, f"{argument} {value} does not exist")
    return int(value)


def references(argument: str, value: Any, model: type[models.Model], *, limit: int) -> list[int] | None:
    """The distinct ids of the ``model`` rows a list (or tuple or set) of instances or
    ids names, in the order given; at most ``limit`` of them. Each is checked as by
    ``reference``; an empty list means none."""
    if value is None:
        return None
    if not isinstance(value, list | tuple | set | frozenset):
        raise InvalidArgument(
            argument,
            f"{argument} must be a list of {model._meta.verbose_name}s or their ids, got {describe(value)}",
        )
    if len(value) > limit:
        raise InvalidArgument(argument, f"{argument} names {len(value)} rows; at most {limit}")
    ids = []
    for i, item in enumerate(value):
        if item is None:
            raise _not_a(f"{argument}[{i}]", item, model)
        ids.append(_reference(f"{argument}[{i}]", item, model))
    return list(dict.fromkeys(ids))


def max_length(model: type[models.Model], field: str) -> int:
    """The ``max_length`` of one of ``model``'s text fields, which every field named here has."""
    found = model._meta.get_field(field)
    if not isinstance(found, models.Field) or found.max_length is None:
        raise TypeError(f"{model.__name__}.{field} has no max_length")
    return found.max_length


@cache
def _largest_id(model: type[models.Model]) -> int:
    return connection.ops.integer_field_range(model._meta.pk.get_internal_type())[1]


def _not_a(argument: str, value: Any, model: type[models.Model]) -> InvalidArgument:
    return InvalidArgument(
        argument, f"{argument} must be a {model._meta.verbose_name} or its id, got {describe(value)}"
    )


def describe(value: Any) -> str:
    """A value's type and, when short, the value: what an error message shows of it."""
    shown = repr(value)
    kind = type(value).__name__
    return f"{kind} {shown}" if len(shown) <= 60 else f"a {kind}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _keys_survive(value: dict[str, Any], text: str, objects: int) -> bool:
    """Whether decoding ``text`` gives ``value`` back: False if the encoder turned a key
    into a string (``1`` into ``"1"``), or a tuple into a list. A flat object, the usual
    payload of ids, needs only its own keys looked at."""
    if objects == 1:
        return all(isinstance(name, str) for name in value)
    return json.loads(text) == value


def _string_problem(value: str) -> str:
    if "\x00" in value:
        return "holds a NUL character (\\u0000), which PostgreSQL cannot store"
    if not _is_utf8(value):
        at = next(i for i, char in enumerate(value) if 0xD800 <= ord(char) <= 0xDFFF)
        return f"holds a lone surrogate (U+{ord(value[at]):04X} at position {at}), which is not Unicode text"
    return ""


def _unencodable(value: dict[str, Any], argument: str, exc: ValueError) -> str:
    if "Circular reference" in str(exc):
        return f"{argument} contains itself"
    if "Out of range float" in str(exc):
        return f"{argument} holds NaN or Infinity, which JSON cannot store"
    return f"{argument} holds a value JSON cannot store: {exc}"


def stored_text_problem(value: Any, where: str) -> str:
    """The first key or string in decoded JSON ``value`` that PostgreSQL would refuse (a
    NUL character, a lone surrogate), named by where it is (``body["a"][3] holds …``);
    empty if there is none. What a request body of JSON is checked with, wherever it
    arrives (the API's parsers, the live pages' WebSocket)."""
    return _first_problem(value, where)


# What a JSON text shows when it may decode to such a string: a \u0000 or surrogate
# escape, or a surrogate itself. Only then is the decoded value walked.
_MAY_NOT_STORE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])|[\ud800-\udfff]")


def may_not_store(text: str) -> bool:
    """Whether JSON ``text`` may hold a string PostgreSQL refuses (a cheap scan in C)."""
    return _MAY_NOT_STORE.search(text) is not None


def _first_problem(value: Any, argument: str) -> str:
    """The first key or string in ``value`` that PostgreSQL would refuse or change, and
    where it is (``payload["a"][3]``); empty if there is none. Iterative: it may be
    called on a payload of any depth."""
    stack: list[tuple[str, Any]] = [(argument, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            problem = _string_problem(item)
            if problem:
                return f"{where} {problem}"
        elif isinstance(item, dict):
            for name, child in item.items():
                if not isinstance(name, str):
                    return (
                        f"{where} has the key {name!r} ({type(name).__name__}); JSON object keys are strings"
                    )
                problem = _string_problem(name)
                if problem:
                    return f"{where} has a key that {problem}"
                stack.append((f"{where}[{json.dumps(name)}]", child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return ""
