"""A payload's identity: SHA-256 of its canonical JSON.

Canonical: keys sorted, no whitespace, non-ASCII characters as themselves (UTF-8), and
numbers as Python's ``json`` writes them. Two payloads equal as JSON values have the same
hash whatever the order of their keys or the spacing they were sent with.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for every call: json.dumps with options builds a new one each time, which
# costs as much as encoding a small payload.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(payload: Any) -> bytes:
    return _ENCODER.encode(payload).encode()


def payload_hash(payload: Any) -> str:
    return digest(canonical_json(payload))


def digest(canonical: bytes) -> str:
    """The hash of a payload already in canonical JSON."""
    return hashlib.sha256(canonical).hexdigest()
