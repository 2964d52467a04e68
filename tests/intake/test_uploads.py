"""Uploads in API views: 413 before the body is read, naming the size and the limit; a
refused file's report as a 400 body."""

from __future__ import annotations

import io

import pytest
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from intake.csv_validation import Column, CsvSchema, validate
from intake.uploads import MULTIPART_SLACK, TooLarge, refuse_large_body, rejected

MB = 1024 * 1024


def request(length: str | None) -> Request:
    extra = {} if length is None else {"CONTENT_LENGTH": length}
    return Request(APIRequestFactory().post("/upload", **extra))


def test_a_body_over_the_limit_and_its_framing_is_refused_naming_both():
    refuse_large_body(request(str(MB + MULTIPART_SLACK)), MB, "entries")  # the slack is allowed
    with pytest.raises(TooLarge) as refused:
        refuse_large_body(request(str(3 * MB)), MB, "entries")
    assert refused.value.status_code == 413
    assert str(refused.value.detail) == (
        "the upload is 3 MB; the limit for entries files is 1 MB: split the file"
    )


@pytest.mark.parametrize("length", [None, "", "chunked", "-5"])
def test_a_body_without_a_usable_length_is_left_to_the_validator(length):
    refuse_large_body(request(length), 1024, "units")


def test_a_refused_file_answers_400_with_its_first_errors():
    schema = CsvSchema("codes", (Column("code", "code"),))
    report = validate(io.BytesIO(b"code\nok\n=bad\n"), schema)

    response = rejected(report, "codes.csv was refused")

    assert response.status_code == 400
    assert response.data == {
        "detail": "codes.csv was refused",
        "rows_checked": 2,
        "rows": 1,
        "error_count": 1,
        "errors": [
            {
                "row": 3,
                "column": "code",
                "reason": "starts with '=': cells that look like a spreadsheet formula are refused",
            }
        ],
        "errors_truncated": False,
    }
