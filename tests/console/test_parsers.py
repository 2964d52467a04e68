"""The JSON parser every API endpoint uses: depth measured before decoding, never a
RecursionError; and the rule that keeps tracebacks for staff."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ParseError

from console.api import BoundedJSONParser
from jobs.arguments import MAX_JSON_DEPTH, json_depth
from jobs.redaction import without_traceback

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab[]{}"\\,: ')),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=30,
)


def depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def parse(text: str) -> object:
    return BoundedJSONParser().parse(io.BytesIO(text.encode()), "application/json", {})


@settings(max_examples=300)
@given(json_values)
def test_the_measured_depth_of_valid_json_is_its_nesting(value):
    assert json_depth(json.dumps(value)) == depth(value)


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from('[]{}"\\ab,:0'), max_size=300))
def test_any_text_parses_or_is_refused_with_a_parse_error(text):
    try:
        parse(text)
    except ParseError:
        pass


def test_the_deepest_body_allowed_parses_and_one_level_more_is_refused():
    assert depth(parse("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)) == MAX_JSON_DEPTH

    with pytest.raises(ParseError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        parse("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))


def test_a_million_levels_are_refused_without_recursion():
    with pytest.raises(ParseError, match="nested deeper"):
        parse("[" * 1_000_000)


def test_brackets_inside_strings_do_not_count():
    assert parse(json.dumps({"text": "[" * 500 + '\\"{' * 100})) == {"text": "[" * 500 + '\\"{' * 100}


def test_a_non_text_charset_is_refused():
    with pytest.raises(ParseError, match="Unsupported charset"):
        BoundedJSONParser().parse(io.BytesIO(b"{}"), "application/json", {"encoding": "bz2_codec"})


def test_without_traceback_keeps_the_message_lines_before_the_first_frame():
    text = (
        "attempts exhausted (1): ValueError: bad row\nsecond line of the message\n"
        '  File "/srv/app/handlers.py", line 3, in run\n    raise ValueError("bad row")\n'
    )

    assert without_traceback(text) == (
        "attempts exhausted (1): ValueError: bad row\nsecond line of the message"
    )
    assert without_traceback("PermanentError: no traceback") == "PermanentError: no traceback"


@pytest.mark.parametrize("body", ['"' + '\\"' * 500_000, '\\"' * 500_000, '"a\\' * 300_000])
def test_a_megabyte_of_escaped_quotes_is_measured_in_one_pass(body, tmp_path):
    # Matching each quote to the end of the body and failing was quadratic: an hour of
    # CPU for this megabyte, holding the web process (the regex engine keeps the GIL, so
    # the bound is kept by a process of its own, killed when it runs past it).
    (tmp_path / "body.json").write_text(body)
    script = "import sys; from jobs.arguments import json_depth; print(json_depth(open(sys.argv[1]).read()))"
    measured = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "body.json")],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )

    assert measured.stdout.strip() == "0"
