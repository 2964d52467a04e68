"""JSON documents: numbers kept as their exact text, uploads read up to their bound."""

from __future__ import annotations

import io

import pytest

from intake.http_sources import DocumentTooLarge, FetchError, json_document, read_json


def test_numbers_keep_their_exact_text():
    assert json_document(b'{"a": 12.50, "b": [1, 1e3]}') == {"a": "12.50", "b": ["1", "1e3"]}


@pytest.mark.parametrize("body", [b"{", b"\xff", b"NaN x"])
def test_a_body_that_is_not_json_is_a_permanent_error(body):
    with pytest.raises(FetchError) as refused:
        json_document(body)
    assert refused.value.transient is False


def test_an_uploaded_document_is_read_no_further_than_its_bound():
    source = io.BytesIO(b"[" + b"1," * 2000 + b"1]")
    with pytest.raises(DocumentTooLarge, match="larger than the 1 kB limit"):
        read_json(source, 1024)
    assert source.tell() == 1025
    assert read_json(io.BytesIO(b'{"x": 1}'), 1024) == {"x": "1"}
