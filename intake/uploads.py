"""File uploads in API views (Django REST framework): a body over the limit refused with a
413 before it is read, and a refused file's validation report as a 400 body; and the
body limit a view declares for the web server (``body_limit``).

A multipart body is a file plus its framing (boundaries, part headers, the other
fields), so a request is refused only when its declared length is over the file's limit
by more than ``MULTIPART_SLACK``; a file that fits in the slack but not the limit is
refused by the validator, which stops reading at the limit. A body without a declared
length is left to the validator too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response

from intake.csv_validation import ValidationReport, human

# Multipart framing around a file: a request this much over the file limit is refused
# before its body is read.
MULTIPART_SLACK = 64 * 1024

View = TypeVar("View")
# Where a view keeps its declared body limit (its content's bound, without the framing).
_BODY_LIMIT = "body_limit"


def body_limit(content_bytes: Callable[[], int]) -> Callable[[View], View]:
    """Declare on a view (a function, or a class-based view's class) the largest request
    body it takes: ``content_bytes()``, read at each request (a setting), plus
    ``MULTIPART_SLACK`` for the framing around it (multipart boundaries and part headers,
    a JSON envelope). The web server's body limiter (project/bodylimit.py) resolves each
    request's path to its view and holds the body to this before reading a byte of it;
    a view that declares nothing takes ``WEB_MAX_BODY_BYTES``."""

    def declare(view: View) -> View:
        setattr(view, _BODY_LIMIT, content_bytes)
        return view

    return declare


def declared_body_limit(view: Any) -> int | None:
    """The body limit ``view`` (a URL pattern's callback) declares, on itself or on its
    class (``as_view()`` keeps the class as ``view_class``), framing included; None
    when it declares none."""
    content_bytes = getattr(view, _BODY_LIMIT, None) or getattr(
        getattr(view, "view_class", None), _BODY_LIMIT, None
    )
    return None if content_bytes is None else int(content_bytes()) + MULTIPART_SLACK


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
