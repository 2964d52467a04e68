"""Pages for the API's listings, and the rule every paginator keeps: a page parameter it
cannot read is a 400 naming it, never a silent default, and the schema states each one's
type and bounds so that what it calls valid is what the server takes.

Cursor pages are stable under inserts and cheap at any depth, and refuse a cursor the
client did not get from us rather than hand its position to PostgreSQL. Limit and offset
pages serve listings that have no stable order to put in a cursor."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination, LimitOffsetPagination
from rest_framework.request import Request

MAX_PAGE_SIZE = 500


def whole_number(request: Request, name: str, default: int, low: int, high: int) -> int:
    """The query parameter ``name`` as a whole number from ``low`` to ``high``, or
    ``default`` when it is absent: anything else (``true``, ``1.5``, ``-1``, beyond the
    bounds) is a 400 naming it. DRF's paginators fall back to their default for a value
    they cannot read, so a client that asked for ``page_size=true`` got a page of a size
    it never chose."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise ValidationError({name: [f"must be a whole number from {low} to {high:,}"]})
    return int(raw)


def bounded_integer(name: str, low: int, high: int, description: str) -> dict[str, Any]:
    """The OpenAPI description of a query parameter that ``whole_number`` reads."""
    return {
        "name": name,
        "required": False,
        "in": "query",
        "description": description,
        "schema": {"type": "integer", "minimum": low, "maximum": high},
    }


class CheckedCursorPagination(CursorPagination):
    """DRF's cursor pages, except that a cursor the client did not get from us is a 400
    naming ``cursor``: DRF checks the cursor's framing (404 when it is garbage) but hands
    its position to the query as is, so a crafted ``p=abc`` on an id ordering reached
    PostgreSQL and failed there."""

    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request: Request) -> int:
        return whole_number(request, self.page_size_query_param, self.page_size, 1, self.max_page_size)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Where the page starts: only a value taken from this list's "
                "own next or previous link; any other value is a 400 naming "
                "the cursor.",
                "schema": {"type": "string"},
            },
            bounded_integer(
                self.page_size_query_param,
                1,
                self.max_page_size,
                f"Rows per page (default {self.page_size}).",
            ),
        ]

    def paginate_queryset(self, queryset: QuerySet, request: Request, view: Any = None) -> Any:
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise self._invalid("not a cursor from this list's next or previous link") from None
        if cursor is None or cursor.position is None:
            return cursor
        name = self.ordering[0] if isinstance(self.ordering, (list, tuple)) else self.ordering
        field = self._model._meta.get_field(name.lstrip("-"))
        try:
            # clean() also runs the field's range validators: a position beyond a bigint
            # would otherwise fail in PostgreSQL rather than here.
            field.clean(cursor.position, None)
        except DjangoValidationError:
            raise self._invalid(f"its position is not a valid {field.name}") from None
        return cursor

    def _invalid(self, reason: str) -> ValidationError:
        return ValidationError({self.cursor_query_param: [f"invalid cursor: {reason}"]})


class StrictLimitOffset(LimitOffsetPagination):
    """``limit`` (1 to ``max_limit``, default ``default_limit``) and ``offset`` (0 or
    more): a bad value is a 400 naming it, never a silent default."""

    default_limit = 100
    max_limit = 1000
    max_offset = 10**9

    def get_limit(self, request: Request) -> int:
        return whole_number(request, self.limit_query_param, self.default_limit, 1, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return whole_number(request, self.offset_query_param, 0, 0, self.max_offset)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            bounded_integer(
                self.limit_query_param, 1, self.max_limit, f"Rows per page (default {self.default_limit})."
            ),
            bounded_integer(
                self.offset_query_param, 0, self.max_offset, "Rows to skip before the page starts."
            ),
        ]


class NewestFirst(CheckedCursorPagination):
    """Cursor pages ordered by id: stable under inserts and cheap at any depth."""

    ordering = "-id"
