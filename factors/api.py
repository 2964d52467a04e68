"""The CO2 calculator's REST API under ``/v1/``: reports, modules and their data entries
(the interactive path), and the emission factors (read only). The bulk endpoints are in
``factors.sync_api``.

Views stay thin: they find what the caller may see (``tenancy.scoping``; another
tenant's report is a 404, like one that does not exist), call ``factors.services`` and
report. Members of a tenant read and edit the entries of their tenant's reports. Factors
are shared reference data: every tenant prices with the same ones, so any member of a
tenant (and a platform operator) reads them all; a user of no tenant reads none.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import RegexValidator
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import (
    BoundedJSONParser,
    CheckedCursorPagination,
    ClosedSerializer,
    StrictFilterBackend,
)
from factors import queries, services
from factors.catalog import DataEntryType, ModuleType
from factors.models import CarbonReport, DataEntry, EmissionFactor, ReportModule
from intake.csv_validation import shown
from tenancy.scoping import scope_queryset, tenant_scope

# --- serializers ----------------------------------------------------------------------------------


class UnitBriefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    code = serializers.CharField()
    name = serializers.CharField()


class ModuleSerializer(serializers.ModelSerializer):
    recalculating = serializers.SerializerMethodField(
        help_text="A bulk job for this module is pending or running: stats may change."
    )

    class Meta:
        model = ReportModule
        fields = ["id", "module_type", "stats", "stats_updated_at", "recalculating"]

    def get_recalculating(self, module: ReportModule) -> bool:
        busy = self.context.get("recalculating")
        if busy is None:
            busy = queries.recalculating([module.pk])
        return module.pk in busy


class ReportSerializer(serializers.ModelSerializer):
    unit = UnitBriefSerializer(read_only=True)
    modules = ModuleSerializer(many=True, read_only=True)

    class Meta:
        model = CarbonReport
        fields = ["id", "unit", "year", "stats", "stats_updated_at", "modules"]


class EntrySerializer(serializers.ModelSerializer):
    kg_co2e = serializers.SerializerMethodField()
    factor = serializers.SerializerMethodField()
    job = serializers.IntegerField(source="job_id", read_only=True, allow_null=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    updated_by = serializers.CharField(source="updated_by.username", read_only=True, allow_null=True)

    class Meta:
        model = DataEntry
        fields = [
            "id",
            "data_entry_type",
            "quantity",
            "unit",
            "classification",
            "kg_co2e",
            "factor",
            "source",
            "job",
            "row_number",
            "created_by",
            "updated_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_kg_co2e(self, entry: DataEntry) -> str | None:
        priced = self._priced(entry)
        return None if priced is None else str(priced.kg_co2e)

    def get_factor(self, entry: DataEntry) -> int | None:
        priced = self._priced(entry)
        return None if priced is None else priced.factor_id

    def _priced(self, entry: DataEntry) -> Any:
        """The emission just computed by an edit (context), else the stored one."""
        if "priced" in self.context:
            return self.context["priced"]
        return getattr(entry, "emission", None)


# What the entries' number columns take (intake.csv_validation.Column, kind "number"):
# up to 12 digits, then at most 6 decimals after a dot, spaces around ignored.
QUANTITY_PATTERN = r"^ *[0-9]{1,12}([.][0-9]{1,6})? *$"


class EntryInputSerializer(ClosedSerializer):
    """Documentation of the body; the rules themselves are the CSV files' (services).

    Rules that depend on other fields are checked by the service, each a 400 naming the
    field: ``data_entry_type`` must be one of the module's types; ``unit``, when given,
    must be that type's unit; ``classification`` must have exactly the type's keys, each
    with one of its codes."""

    data_entry_type = serializers.ChoiceField(choices=DataEntryType.choices)
    quantity = serializers.CharField(
        validators=[RegexValidator(QUANTITY_PATTERN)],
        help_text="A non-negative decimal: up to 12 digits, at most 6 decimals.",
    )
    unit = serializers.CharField(required=False, help_text="Defaults to the type's unit.")
    classification = serializers.DictField(child=serializers.CharField())


# --- helpers ---------------------------------------------------------------------------------------


def visible_reports(request: Request) -> QuerySet[CarbonReport]:
    """The reports of the caller's tenant (every tenant's for platform operators)."""
    return scope_queryset(CarbonReport.objects.select_related("unit"), request.user, field="unit__tenant")


def visible_module(request: Request, report_id: int, module_type: str) -> ReportModule:
    """A module of a report the caller may see; 404 otherwise (hidden like a missing one)."""
    if module_type not in ModuleType.values:  # checked here: "\x00" fails in SQL
        raise NotFound(f"no module {shown(module_type)}; modules are {', '.join(ModuleType.values)}")
    modules = scope_queryset(
        ReportModule.objects.select_related("report__unit"), request.user, field="report__unit__tenant"
    )
    return get_object_or_404(modules, report_id=report_id, module_type=module_type)


def invalid(exc: services.InvalidRequest) -> ValidationError:
    """A service's refusal as DRF's 400, by field."""
    return ValidationError(exc.errors)


# --- reports and modules -------------------------------------------------------------------------


class YearFilter(filters.NumberFilter):
    """A whole year (``NumberFilter`` would take 2024.5) from 2000 to 2100, the range the
    database's constraints allow, with the schema saying so."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 2000)
        kwargs.setdefault("max_value", 2100)
        kwargs.setdefault("help_text", "A year, 2000 to 2100.")
        super().__init__(*args, **kwargs)
        # An override replaces the generated schema, help text included.
        extend_schema_field(
            {
                "type": "integer",
                "minimum": kwargs["min_value"],
                "maximum": kwargs["max_value"],
                "description": kwargs["help_text"],
            }
        )(self)


class ReportFilter(filters.FilterSet):
    year = YearFilter()
    unit = filters.CharFilter(field_name="unit__code", help_text="A unit code, exactly.")

    class Meta:
        model = CarbonReport
        fields: list[str] = []


class ById(CheckedCursorPagination):
    ordering = "id"


class PagedView(APIView):
    """A view that answers one cursor page of its rows (``_page``)."""

    pagination_class: type[CheckedCursorPagination]
    paginator: CheckedCursorPagination


def _page(view: PagedView, request: Request, queryset: QuerySet) -> list[Any]:
    """Strictly filtered (an unknown parameter is a 400), then one cursor page."""
    view.paginator = view.pagination_class()  # per request: it keeps the request's cursor
    queryset = StrictFilterBackend().filter_queryset(request, queryset, view)
    return view.paginator.paginate_queryset(queryset, request, view=view)


class ReportList(PagedView):
    permission_classes = [IsAuthenticated]
    queryset = CarbonReport.objects.none()  # the schema's model; requests scope their own
    pagination_class = ById  # what the schema documents: a cursor page (``_page``)
    filterset_class = ReportFilter
    filter_backends = [StrictFilterBackend]

    @extend_schema(
        tags=["co2"], summary="Carbon reports you may see", responses={200: ReportSerializer(many=True)}
    )
    def get(self, request: Request) -> Response:
        rows = _page(self, request, visible_reports(request).prefetch_related("modules"))
        busy = queries.recalculating(m.pk for r in rows for m in r.modules.all())
        data = ReportSerializer(rows, many=True, context={"recalculating": busy}).data
        return self.paginator.get_paginated_response(data)


class ReportDetail(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        tags=["co2"], summary="A report with its stats and modules", responses={200: ReportSerializer}
    )
    def get(self, request: Request, report: int) -> Response:
        found = get_object_or_404(visible_reports(request).prefetch_related("modules"), pk=report)
        busy = queries.recalculating(m.pk for m in found.modules.all())
        return Response(ReportSerializer(found, context={"recalculating": busy}).data)


class ModuleDetail(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        tags=["co2"],
        summary="A module's stats, and whether it is recalculating",
        responses={200: ModuleSerializer},
    )
    def get(self, request: Request, report: int, module: str) -> Response:
        return Response(ModuleSerializer(visible_module(request, report, module)).data)


# --- the interactive path ----------------------------------------------------------------------------


class EntryFilter(filters.FilterSet):
    data_entry_type = filters.ChoiceFilter(choices=DataEntryType.choices)
    source = filters.ChoiceFilter(choices=DataEntry.Source.choices)

    class Meta:
        model = DataEntry
        fields: list[str] = []


def _change_body(change: services.EntryChange) -> dict[str, Any]:
    entry = None
    if change.entry is not None:
        entry = EntrySerializer(change.entry, context={"priced": change.emission}).data
    return {
        "entry": entry,
        "warnings": change.warnings,
        "module": ModuleSerializer(change.module).data,
        "report": {"id": change.report.pk, "stats": change.report.stats},
    }


class EntryList(PagedView):
    permission_classes = [IsAuthenticated]
    queryset = DataEntry.objects.none()  # the schema's model; requests scope their own
    pagination_class = ById  # what the schema documents: a cursor page (``_page``)
    parser_classes = [BoundedJSONParser]
    filterset_class = EntryFilter
    filter_backends = [StrictFilterBackend]

    @extend_schema(
        tags=["co2"],
        summary="A module's data entries, in id order",
        responses={200: EntrySerializer(many=True)},
    )
    def get(self, request: Request, report: int, module: str) -> Response:
        found = visible_module(request, report, module)
        entries = (
            DataEntry.objects.current()
            .filter(module=found)
            .select_related("emission", "created_by", "updated_by")
        )
        rows = _page(self, request, entries)
        return self.paginator.get_paginated_response(EntrySerializer(rows, many=True).data)

    @extend_schema(
        tags=["co2"],
        summary="Add an entry; answers with the new stats",
        request=EntryInputSerializer,
        responses={201: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request, report: int, module: str) -> Response:
        found = visible_module(request, report, module)
        try:
            change = services.create_entry(found.pk, _body(request), actor=request.user)
        except services.InvalidRequest as exc:
            raise invalid(exc) from exc
        return Response(_change_body(change), status=status.HTTP_201_CREATED)


class EntryDetail(APIView):
    permission_classes = [IsAuthenticated]
    parser_classes = [BoundedJSONParser]

    @extend_schema(tags=["co2"], summary="One data entry", responses={200: EntrySerializer})
    def get(self, request: Request, report: int, module: str, entry: int) -> Response:
        found = visible_module(request, report, module)
        row = get_object_or_404(
            DataEntry.objects.current().select_related("emission", "created_by", "updated_by"),
            module=found,
            pk=entry,
        )
        return Response(EntrySerializer(row).data)

    @extend_schema(
        tags=["co2"],
        summary="Change an entry; answers with the new stats",
        request=EntryInputSerializer(partial=True),
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def patch(self, request: Request, report: int, module: str, entry: int) -> Response:
        found = visible_module(request, report, module)
        try:
            change = services.update_entry(found.pk, entry, _body(request), actor=request.user)
        except services.InvalidRequest as exc:
            raise self._not_found_orinvalid(exc) from exc
        return Response(_change_body(change))

    @extend_schema(
        tags=["co2"],
        summary="Delete an entry; answers with the new stats",
        responses={200: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
    )
    def delete(self, request: Request, report: int, module: str, entry: int) -> Response:
        found = visible_module(request, report, module)
        try:
            change = services.delete_entry(found.pk, entry, actor=request.user)
        except services.InvalidRequest as exc:
            raise self._not_found_orinvalid(exc) from exc
        return Response(_change_body(change))

    def _not_found_orinvalid(self, exc: services.InvalidRequest) -> APIException:
        if "entry" in exc.errors:
            return NotFound(exc.errors["entry"][0])
        return invalid(exc)


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ValidationError({"detail": ["the body must be a JSON object"]})
    return dict(request.data)


# --- emission factors (read only) -------------------------------------------------------------------


class FactorSerializer(serializers.ModelSerializer):
    stale = serializers.BooleanField(
        source="is_stale",
        read_only=True,
        help_text=(
            "Left out of the latest upload of its type that covered its year; kept, so the "
            "entries priced with it stay linked."
        ),
    )

    class Meta:
        model = EmissionFactor
        fields = [
            "id",
            "data_entry_type",
            "year",
            "classification",
            "value",
            "unit",
            "source",
            "stale",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class StrictBooleanField(forms.NullBooleanField):
    """``true`` or ``false`` (also ``1``/``0``); anything else is an error naming the
    value. Django's ``NullBooleanField`` reads an unknown value as "no filter", so
    ``?stale=yes`` would silently list every factor."""

    TRUE, FALSE = ("true", "1"), ("false", "0")

    # NullBooleanField.to_python returns None for "no value"; the stubs give it BooleanField's.
    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]
        if value in (None, "") or isinstance(value, bool):
            return value if isinstance(value, bool) else None
        text = str(value).strip().lower()
        if text in self.TRUE:
            return True
        if text in self.FALSE:
            return False
        raise forms.ValidationError(
            f"{shown(str(value))} is not a boolean: use true or false", code="invalid"
        )


class StrictBooleanFilter(filters.BooleanFilter):
    """The text as sent: django-filter's boolean widgets read what they do not know as empty."""

    field_class = StrictBooleanField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


class FactorFilter(filters.FilterSet):
    type = filters.ChoiceFilter(
        field_name="data_entry_type",
        choices=DataEntryType.choices,
        help_text="A data-entry type, e.g. plane.",
    )
    year = YearFilter()
    stale = StrictBooleanFilter(
        field_name="is_stale", help_text="true: only stale factors; false: only current ones."
    )

    class Meta:
        model = EmissionFactor
        fields: list[str] = []


def visible_factors(request: Request) -> QuerySet[EmissionFactor]:
    """Every factor for a member of a tenant or a platform operator; none for a user of
    no tenant (what ``scope_queryset`` gives such a user everywhere else)."""
    scope = tenant_scope(request.user)
    if scope is False or scope is None:
        return EmissionFactor.objects.none()
    return EmissionFactor.objects.all()


class FactorList(PagedView):
    permission_classes = [IsAuthenticated]
    queryset = EmissionFactor.objects.none()  # the schema's model; requests scope their own
    pagination_class = ById  # what the schema documents: a cursor page (``_page``)
    filterset_class = FactorFilter
    filter_backends = [StrictFilterBackend]

    @extend_schema(
        tags=["co2"], summary="Emission factors, in id order", responses={200: FactorSerializer(many=True)}
    )
    def get(self, request: Request) -> Response:
        rows = _page(self, request, visible_factors(request))
        return self.paginator.get_paginated_response(FactorSerializer(rows, many=True).data)


class FactorDetail(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(tags=["co2"], summary="One emission factor", responses={200: FactorSerializer})
    def get(self, request: Request, id: int) -> Response:
        return Response(FactorSerializer(get_object_or_404(visible_factors(request), pk=id)).data)
