"""File uploads in API views (Django REST framework): a body over the limit refused with a
413 before it is read, and a refused file's validation report as a 400 body.

A multipart body is a file plus its framing (boundaries, part headers, the other
fields), so a request is refused only when its declared length is over the file's limit
by more than ``MULTIPART_SLACK``; a file that fits in the slack but not the limit is
refused by the validator, which stops reading at the limit. A body without a declared
length is left to the validator too.
"""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response

from intake.csv_validation import ValidationReport, human

# Multipart framing around a file: a request this much over the file limit is refused
# before its body is read.
MULTIPART_SLACK = 64 * 1024


class TooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"


def refuse_large_body(request: Request, limit: int, kind: str) -> None:
    """413 (TooLarge) before the body is read, naming the size and the limit of ``kind``
    files: a file over the limit is not streamed to disk first."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    if length.isdigit() and int(length) > limit + MULTIPART_SLACK:
        raise TooLarge(
            f"the upload is {human(int(length))}; the limit for {kind} files "
            f"is {human(limit)}: split the file"
        )


def rejected(report: ValidationReport, detail: str) -> Response:
    """400 for a refused file: ``detail``, the data rows checked (valid or not), and the
    report's first errors (row, column, reason), their count and whether the list was cut."""
    return Response(
        {"detail": detail, "rows_checked": report.checked, **report.as_dict()},
        status=status.HTTP_400_BAD_REQUEST,
    )
