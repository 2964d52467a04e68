"""A payload's identity: SHA-256 of its canonical JSON, as RFC 8785 (JCS) writes it.

JCS sorts keys by their UTF-16 code units, writes no whitespace, escapes only what JSON
must, and writes numbers as ECMAScript does: ``1.0`` and ``1`` are both ``1``. Two payloads
equal as JSON values have the same hash whatever the order of their keys, their spacing
or how their numbers were written. Floats are written by ``rfc8785``; an integer beyond
±(2^53 − 1), which JCS leaves out (its numbers are doubles), is written with its exact
digits, so that two large ids that differ never share a hash.

What is stored is ``canonical_json``: the same text but for the numbers, which keep
Python's writing (a large integer keeps its digits in the database). Where it holds no
float and no character beyond the Basic Multilingual Plane (whose UTF-16 order may
differ), that text is the JCS one and is hashed as it is: most payloads are encoded once.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import rfc8785

# One encoder for every call: json.dumps with options builds a new one each time, which
# costs as much as encoding a small payload.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# What may make the stored text differ from JCS: a number with a fraction or an exponent
# (a float), a character past U+FFFF (its UTF-8 lead byte). Inside strings too: such a
# match only costs the longer way.
_NOT_JCS = re.compile(rb"[:,\[]-?[0-9]+[.eE]|[\xf0-\xf4]")


def canonical_json(payload: Any) -> bytes:
    """The payload's text as stored: keys sorted, no whitespace, UTF-8."""
    return _ENCODER.encode(payload).encode()


def payload_hash(payload: Any) -> str:
    return hash_of(payload, canonical_json(payload))


def hash_of(payload: Any, canonical: bytes) -> str:
    """The hash of ``payload``, whose ``canonical_json`` is ``canonical``."""
    return digest(jcs(payload, canonical))


def jcs(payload: Any, canonical: bytes | None = None) -> bytes:
    """``payload`` as RFC 8785 writes it (but for integers beyond its range, see above)."""
    text = canonical if canonical is not None else canonical_json(payload)
    if not _NOT_JCS.search(text):
        return text
    out: list[str] = []
    _write(payload, out)
    return "".join(out).encode()


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for index, key in enumerate(sorted(value, key=lambda name: name.encode("utf-16-be"))):
            out.append("," if index else "")
            out.append(_ENCODER.encode(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            out.append("," if index else "")
            _write(item, out)
        out.append("]")
    elif isinstance(value, float):
        out.append(rfc8785.dumps(value).decode())
    else:
        # null, booleans, strings (JSON's escapes are JCS's) and integers, exactly.
        out.append(_ENCODER.encode(value))


def digest(canonical: bytes) -> str:
    """SHA-256 of a payload's JCS text, in hex."""
    return hashlib.sha256(canonical).hexdigest()
