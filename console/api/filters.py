"""Filtering for the API's listings that refuses what it does not understand.

A typo in a filter (``?stat=failed``) or an unsupported ordering must answer 400 naming
the parameter, never silently return the unfiltered list: an operator who bulk-retries
"the failed jobs" from such a listing would act on everything. Likewise a value the
database cannot take (a UTC offset PostgreSQL does not store) is refused here, as a 400
naming the parameter, before any query runs. (Cursor pages: ``console.api.pagination``.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django_filters import fields as filter_fields
from django_filters import rest_framework as filters
from django_filters.utils import translate_validation
from drf_spectacular.utils import extend_schema_field
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.request import Request
from rest_framework.settings import api_settings

from jobs.models import Event, Job

# PostgreSQL's timestamptz input takes UTC offsets up to 15:59 either way; Python's
# datetime takes up to 23:59, so a wider one parses here and then fails in the query.
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)
MIN_YEAR, MAX_YEAR = 2, 9998


class StorableDateTimeField(filter_fields.IsoDateTimeField):
    """An ISO 8601 date-time that PostgreSQL can compare with: its UTC offset within
    ±15:59, and its year from 2 to 9998, so that it stays within Python's years 1 to 9999
    once moved to UTC."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None or parsed.tzinfo is None:
            return parsed
        offset = parsed.utcoffset() or timedelta(0)
        if abs(offset) > MAX_UTC_OFFSET:
            raise DjangoValidationError(
                f"UTC offset {_offset_text(offset)} is out of range: use one between "
                "-15:59 and +15:59 (or Z)",
                code="invalid",
            )
        if not MIN_YEAR <= parsed.year <= MAX_YEAR:
            # Years 1 and 9999 can leave Python's range once moved to UTC; refusing them
            # whole keeps the rule one the schema's pattern can state.
            raise DjangoValidationError(
                f"year {parsed.year} is out of range: use one from {MIN_YEAR} to {MAX_YEAR}", code="invalid"
            )
        return parsed.astimezone(UTC)


def _offset_text(offset: timedelta) -> str:
    sign = "-" if offset < timedelta(0) else "+"
    minutes = int(abs(offset).total_seconds()) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


# What StorableDateTimeField takes, said in the schema: an RFC 3339 date-time whose year
# is 2 to 9998 and whose UTC offset, if any, is within ±15:59.
STORABLE_DATETIME_PATTERN = (
    r"^(000[2-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]"
    r"|999[0-8])-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]+)?)?"
    r"([Zz]|[+-](0[0-9]|1[0-5]):[0-5][0-9])?$"
)
STORABLE_DATETIME_DESCRIPTION = (
    "An ISO 8601 date-time from year 2 to 9998 with a UTC offset within ±15:59 (or Z)."
)


class DateTimeFilter(filters.IsoDateTimeFilter):
    """``IsoDateTimeFilter`` whose values PostgreSQL can always take (see above), and
    whose schema says which those are."""

    field_class = StorableDateTimeField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # An override replaces the generated schema, help text included: carry it over.
        description = " ".join(filter(None, [kwargs.get("help_text"), STORABLE_DATETIME_DESCRIPTION]))
        extend_schema_field(
            {
                "type": "string",
                "format": "date-time",
                "description": description,
                "pattern": STORABLE_DATETIME_PATTERN,
            }
        )(self)


class StrictOrderingFilter(OrderingFilter):
    """``?ordering=`` limited to ``ordering_fields``; anything else is a 400, not ignored.
    Terms are taken exactly as sent (``id, -created_at`` with a space is refused), so that
    the pattern the schema gives is the whole rule."""

    def get_ordering(self, request: Request, queryset: QuerySet, view: Any) -> Any:
        requested = request.query_params.get(self.ordering_param)
        if requested:
            valid = {
                name
                for field, _ in self.get_valid_fields(queryset, view, {"request": request})
                for name in (field, f"-{field}")
            }
            bad = [term for term in requested.split(",") if term not in valid]
            if bad:
                raise ValidationError(
                    {
                        self.ordering_param: [
                            f"cannot order by {', '.join(bad)}; use one of {', '.join(sorted(valid))}"
                        ]
                    }
                )
        return super().get_ordering(request, queryset, view)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        fields = [name for name in getattr(view, "ordering_fields", None) or [] if isinstance(name, str)]
        if not fields or fields == ["__all__"]:
            return super().get_schema_operation_parameters(view)
        term = f"-?({'|'.join(re.escape(name) for name in fields)})"
        return [
            {
                "name": self.ordering_param,
                "required": False,
                "in": "query",
                "description": "Comma-separated fields to order by, each optionally "
                f"preceded by - for descending: {', '.join(fields)}.",
                "schema": {"type": "string", "pattern": f"^({term}(,{term})*)?$"},
            }
        ]


def passthrough_parameters(view: Any) -> set[str]:
    """Query parameters that are not filters but still mean something: the cursor, the
    page size (or limit and offset), the ordering, DRF's ``format``, and those the view
    reads itself (its ``query_parameters``, e.g. the tenant that tells a name apart)."""
    names = {api_settings.URL_FORMAT_OVERRIDE, *getattr(view, "query_parameters", ())}
    paginator = getattr(view, "paginator", None)
    names |= {
        getattr(paginator, "cursor_query_param", None),
        getattr(paginator, "page_size_query_param", None),
        getattr(paginator, "limit_query_param", None),
        getattr(paginator, "offset_query_param", None),
    }
    names |= {getattr(backend, "ordering_param", None) for backend in view.filter_backends}
    return {name for name in names if name}


def reject_unknown(params: Iterable[str], known: set[str]) -> dict[str, list[str]]:
    return {
        name: [f"unknown query parameter; use {', '.join(sorted(known))}"]
        for name in sorted(set(params) - known)
    }


def reject_empty(filterset: filters.FilterSet, params: Any) -> dict[str, list[str]]:
    """Typed filters (a number, a date-time, a choice, a UUID, a boolean) sent empty: a
    form reads ``?year=`` as no filter, but the schema calls an empty string no number,
    so the client that sent one gets the 400 the schema promises. Free-text filters take
    an empty string like any other."""
    return {
        name: ["empty: give a value, or leave the parameter out"]
        for name, found in filterset.filters.items()
        if not isinstance(found, filters.CharFilter)
        and any(not value.strip() for value in params.getlist(name))
    }


class StrictFilterBackend(filters.DjangoFilterBackend):
    """django-filter, except that an unknown query parameter is a 400 naming it: a typo
    such as ``?stat=failed`` must not silently list every job."""

    def filter_queryset(self, request: Request, queryset: QuerySet, view: Any) -> QuerySet:
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        errors: dict[str, Any] = {}
        if not filterset.is_valid():
            errors.update(translate_validation(filterset.errors).detail)
        known = set(filterset.form.fields) | passthrough_parameters(view)
        errors.update(reject_unknown(request.query_params, known))
        errors.update(reject_empty(filterset, request.query_params))
        if errors:
            raise ValidationError(errors)
        return filterset.qs


class IdFilter(filters.Filter):
    """An integer id (``NumberFilter`` would accept 1.5 and round it)."""

    field_class = forms.IntegerField


class JobFilter(filters.FilterSet):
    state = filters.MultipleChoiceFilter(
        choices=Job.State.choices, help_text="Repeat to match any of several states."
    )
    type = filters.CharFilter(help_text="The job type (handler name), exactly.")
    queue = filters.CharFilter()
    pipeline = filters.UUIDFilter(field_name="pipeline_id")
    tenant = IdFilter(
        field_name="tenant_id", help_text="A tenant id; only platform operators see several tenants."
    )
    parent = IdFilter(field_name="parent_id", help_text="The parent job's id.")
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")
    finished_after = DateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = DateTimeFilter(field_name="finished_at", lookup_expr="lt")
    failed_since = DateTimeFilter(
        method="filter_failed_since", help_text="Failed jobs that finished at or after this time."
    )

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_failed_since(self, queryset: QuerySet[Job], name: str, value: datetime) -> QuerySet[Job]:
        return queryset.filter(state=Job.State.FAILED, finished_at__gte=value)


class EventFilter(filters.FilterSet):
    name = filters.CharFilter(help_text="The event name, exactly.")
    pipeline = filters.UUIDFilter(field_name="pipeline_id")
    tenant = IdFilter(field_name="tenant_id")
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Event
        fields: list[str] = []
