"""Properties of what a sync reads: a payload's hash is its JSON value's (RFC 8785),
whatever the key order, spacing or number writing it came with, and a sync's references
are checked and ordered the same way for any input."""

from __future__ import annotations

import hashlib
import json

import pytest
import rfc8785
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


SAFE = 2**53 - 1
jcs_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
jcs_payloads = st.dictionaries(
    texts,
    st.recursive(
        jcs_scalars,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
        max_leaves=20,
    ),
    max_size=6,
)


@given(jcs_payloads)
def test_the_hash_is_sha256_of_the_rfc8785_text(payload):
    assert payload_hash(payload) == hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


def as_floats(value):
    """The same JSON value with every integer written as a number with a fraction."""
    if isinstance(value, dict):
        return {key: as_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_floats(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@given(jcs_payloads)
def test_a_number_hashes_alike_however_it_is_written(payload):
    assert payload_hash(as_floats(payload)) == payload_hash(payload)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"n": 1}, {"n": 1.0}),
        ({"n": 0}, {"n": -0.0}),
        ({"n": [100, 1e2]}, {"n": [1e2, 100]}),
        ({"n": 1e21}, {"n": 1000000000000000000000.0}),
        ({"\U0001f600": 1, "\ufb33": 2}, {"\ufb33": 2, "\U0001f600": 1}),
    ],
)
def test_equal_json_values_written_otherwise_share_a_hash(one, other):
    assert payload_hash(one) == payload_hash(other)


def test_integers_past_the_double_range_keep_their_digits():
    """JCS leaves them out; two large ids that differ must not share a hash."""
    assert payload_hash({"id": 2**60}) != payload_hash({"id": 2**60 + 1})
    assert payload_hash({"id": 2**60}) == hashlib.sha256(b'{"id":1152921504606846976}').hexdigest()
    # A float is written as ECMAScript writes it, its shortest digits padded with zeros.
    assert payload_hash({"id": float(2**60)}) == hashlib.sha256(b'{"id":1152921504606847000}').hexdigest()


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
