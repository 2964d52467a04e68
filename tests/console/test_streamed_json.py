"""The streamed JSON parser's check for lone surrogates, which its C parser would turn
into "?" without a word: whatever the pieces the body arrives in, it agrees with Python's
decoder on which strings are Unicode text."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.exceptions import ParseError

from console.api.streaming import LoneSurrogates, StreamedJSONParser

# Pieces of a JSON string's text: surrogate halves, escaped backslashes (which make the
# next "ud800" plain text), other escapes, plain characters.
PARTS = [
    r"\ud800",
    r"\udbff",
    r"\udc00",
    r"\udfff",
    r"\ud83d",
    r"\ude00",
    "\\\\",
    "\\",
    "u",
    "d800",
    r"\n",
    r"\u00e9",
    r"\"",
    "a",
    "é",
]


def is_text(body: bytes) -> bool | None:
    """Whether Python decodes ``body`` to Unicode text; None when it is not JSON."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def scanned_as_text(body: bytes, cuts: list[int]) -> bool:
    scanner = LoneSurrogates()
    try:
        start = 0
        for cut in [*sorted(cuts), len(body)]:
            scanner.feed(body[start:cut])
            start = cut
        scanner.feed(b"", final=True)
    except ParseError:
        return False
    return True


@given(st.lists(st.sampled_from(PARTS), max_size=12), st.lists(st.integers(0, 200), max_size=4))
def test_the_scanner_agrees_with_pythons_decoder_however_the_body_is_cut(parts, cuts):
    body = ('"' + "".join(parts) + '"').encode()
    expected = is_text(body)
    if expected is not None:
        assert scanned_as_text(body, [c for c in cuts if c <= len(body)]) == expected


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (r'"\ud83d\ude00"', True),
        (r'"\ud800"', False),
        (r'"\udc00"', False),
        (r'"x\\ud800"', True),
        (r'"x\\\ud800"', False),
        (r'"\ud800\ud800\udc00"', False),
    ],
)
def test_pairs_pass_and_lone_halves_do_not(text, ok):
    assert scanned_as_text(text.encode(), list(range(len(text)))) is ok


def test_a_body_of_backslashes_keeps_the_carry_small():
    scanner = LoneSurrogates()
    scanner.feed(b'"')
    for _ in range(64):
        scanner.feed(b"\\" * 65_537)  # odd: each piece ends inside a pair
        assert len(scanner.carry) <= 7
    scanner.feed(b'ud800"')  # 64 odd pieces: an even run, so "ud800" is plain text
    scanner.feed(b"", final=True)


class Parser(StreamedJSONParser):
    max_bytes_setting = "INGEST_SCRAPE_MAX_BYTES"


@pytest.mark.parametrize("number", [2**63, -(2**63) - 1, 10**40, 123456789012345678901234567890])
def test_an_integer_beyond_64_bits_is_read_exactly(number):
    body = json.dumps({"before": [1.5, "x"], "big": number, "after": {"n": 2**62}}).encode()

    assert Parser().parse(io.BytesIO(body)) == {"before": [1.5, "x"], "big": number, "after": {"n": 2**62}}


def test_a_body_read_again_keeps_its_bounds():
    body = b'{"big": 123456789012345678901234567890, "s": "\\ud800"}'

    with pytest.raises(ParseError, match="lone surrogate"):
        Parser().parse(io.BytesIO(body))
