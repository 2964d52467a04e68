"""Properties of what a sync reads: a payload's hash is its JSON value's, whatever the
key order or spacing it came with, and a sync's references are checked and ordered the
same way for any input."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.scraping import services
from ingest.scraping.hashing import canonical_json, payload_hash

# Text PostgreSQL can store: UTF-8 (no lone surrogate) without NUL.
storable = st.characters(codec="utf-8", exclude_characters="\x00")
texts = st.text(storable)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=20,
)
payloads = st.dictionaries(texts, values, max_size=6)


def shuffled(value, draw):
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        keys = draw(st.permutations(list(value)))
        return {key: shuffled(value[key], draw) for key in keys}
    if isinstance(value, list):
        return [shuffled(item, draw) for item in value]
    return value


@given(payloads, st.data())
def test_the_hash_is_the_values_whatever_its_key_order_or_spacing(payload, data):
    other = shuffled(payload, data.draw)
    assert payload_hash(other) == payload_hash(payload)
    spaced = json.loads(json.dumps(payload, indent=3))
    assert payload_hash(spaced) == payload_hash(payload)
    assert json.loads(canonical_json(payload)) == payload
    expected = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert payload_hash(payload) == hashlib.sha256(expected.encode()).hexdigest()


@given(payloads, payloads)
def test_different_values_have_different_hashes(first, second):
    if first != second:
        assert payload_hash(first) != payload_hash(second)


items = st.lists(
    st.fixed_dictionaries({"external_id": st.text(storable, min_size=1, max_size=8), "payload": payloads}),
    max_size=12,
)


@settings(max_examples=200)
@given(items)
def test_references_are_taken_in_id_order_or_refused_naming_a_duplicate(references):
    ids = [item["external_id"] for item in references]
    if len(set(ids)) < len(ids):
        with pytest.raises(services.SyncRefused) as refused:
            services.read_references(references)
        assert refused.value.field.endswith(".external_id")
        return
    incoming = services.read_references(references)
    assert incoming.external_ids == sorted(ids)
    by_id = {item["external_id"]: item["payload"] for item in references}
    for external_id, text, hash_ in zip(
        incoming.external_ids, incoming.payloads, incoming.hashes, strict=True
    ):
        assert json.loads(text) == by_id[external_id]
        assert hash_ == payload_hash(by_id[external_id])
