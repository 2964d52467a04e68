"""Cursor pages for the API's listings: stable under inserts, cheap at any depth, and
refusing a cursor the client did not get from us with a 400 naming ``cursor`` rather
than handing its position to PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request


class CheckedCursorPagination(CursorPagination):
    """DRF's cursor pages, except that a cursor the client did not get from us is a 400
    naming ``cursor``: DRF checks the cursor's framing (404 when it is garbage) but hands
    its position to the query as is, so a crafted ``p=abc`` on an id ordering reached
    PostgreSQL and failed there."""

    page_size_query_param = "page_size"
    max_page_size = 500

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


class NewestFirst(CheckedCursorPagination):
    """Cursor pages ordered by id: stable under inserts and cheap at any depth."""

    ordering = "-id"
