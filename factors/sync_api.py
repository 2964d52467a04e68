"""The ``/sync/…`` endpoints: operators start bulk pipelines (uploads, API ingest,
factors, units, recalculation) and follow them (``/sync/pipelines/{id}``).

Each answers 202 with the first job and its pipeline once the request is validated and
the job enqueued; 400 with the file's first errors (row, column, reason) when a file is
refused, nothing written; 409 when the same work is already unfinished; 413 when a file
is over its size limit, before its body is read. Entry uploads need staff; factors,
units and recalculations by type are global and need a platform operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.http import QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import jobs
from console.api import (
    BoundedJSONParser,
    ErrorSerializer,
    ErrorTextField,
    JobSerializer,
    Operates,
    object_body,
    visible_jobs,
)
from factors import conf, queries, services
from factors.api import invalid, visible_module
from factors.catalog import DataEntryType, ModuleType
from factors.models import DataEntry, EmissionFactor, ReportModule, Unit
from intake import uploads
from tenancy.scoping import scope_queryset

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise


class PipelineJobSerializer(JobSerializer):
    last_error = ErrorTextField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "result", "last_error"]
        read_only_fields = fields


class DispatchedSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    pipeline = serializers.UUIDField()
    type = serializers.CharField()
    state = serializers.CharField()
    rows = serializers.IntegerField(allow_null=True)
    created = serializers.BooleanField()
    pipeline_url = serializers.CharField()


def _dispatched(result: services.Dispatched) -> Response:
    job = result.job
    body = {
        "job": job.pk,
        "pipeline": job.pipeline_id,
        "type": job.type,
        "state": job.state,
        "rows": result.rows,
        "created": result.created,
        "pipeline_url": f"/sync/pipelines/{job.pipeline_id}",
    }
    return Response(
        DispatchedSerializer(body).data,
        status=status.HTTP_202_ACCEPTED if result.created else status.HTTP_200_OK,
    )


def _rejected(exc: services.UploadRejected) -> Response:
    return uploads.rejected(exc.report, str(exc))


def _conflict(exc: services.AlreadyRunning) -> Response:
    return Response(
        {"detail": str(exc), "job": exc.job.pk, "pipeline": str(exc.job.pipeline_id)},
        status=status.HTTP_409_CONFLICT,
    )


def _answer(start: Callable[[], services.Dispatched]) -> Response:
    """Start a sync through its service and answer as every sync endpoint does: 202 (or
    200 for work already queued), 400 naming the problem, 409 when it already runs."""
    try:
        result = start()
    except services.UploadRejected as exc:
        return _rejected(exc)
    except services.InvalidRequest as exc:
        raise invalid(exc) from exc
    except services.AlreadyRunning as exc:
        return _conflict(exc)
    return _dispatched(result)


def _refuse_large_body(request: Request, kind: str) -> None:
    """413 before the body is read: a file over the limit is not streamed to disk first."""
    uploads.refuse_large_body(request, conf.max_bytes(kind), kind)


# --- request bodies: each endpoint's fields, checked before anything is looked up -----------

FILE_REQUIRED: dict[str, str | StrPromise] = {"required": "required: the CSV file, as multipart/form-data"}


def _id() -> serializers.IntegerField:
    return serializers.IntegerField(min_value=1, max_value=2**63 - 1)


@extend_schema_field({"type": "string", "format": "binary", "minLength": 1})
class UploadField(serializers.FileField):
    """A file part of a multipart body, documented as the bytes it is (drf-spectacular
    describes a ``FileField`` by its answer, a URI, unless told it is a request); an
    empty file is not one."""


def _year(**kwargs: Any) -> serializers.IntegerField:
    """A year the factors' tables can hold (their constraints: 2000 to 2100)."""
    return serializers.IntegerField(min_value=2000, max_value=2100, **kwargs)


def _module() -> serializers.ChoiceField:
    return serializers.ChoiceField(ModuleType.choices, help_text="The module type, e.g. travel.")


def _entry_type() -> serializers.ChoiceField:
    return serializers.ChoiceField(DataEntryType.choices, help_text="One of the module's data-entry types.")


def _url(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(max_length=2000, **kwargs)


URL_RULE = (
    "An http(s) URL answering JSON, whose host the outbound rules allow (checked when the request arrives)."
)
FILE_RULE = "A refused file is a 400 with the rows checked and the first errors (row, column, reason)."


class DispatchBody(serializers.Serializer):
    report = _id()
    module = _module()
    data_entry_type = _entry_type()
    file = UploadField(error_messages=FILE_REQUIRED, help_text=f"The entries CSV. {FILE_RULE}")


class ApiIngestBody(serializers.Serializer):
    report = _id()
    module = _module()
    data_entry_type = _entry_type()
    url = _url(min_length=1, help_text=URL_RULE)


class FactorUploadBody(serializers.Serializer):
    file = UploadField(error_messages=FILE_REQUIRED, help_text=f"The factors CSV. {FILE_RULE}")


class UnitSyncUrlBody(serializers.Serializer):
    """A unit sync without a file: a JSON body or a urlencoded form."""

    year = _year()
    url = _url(
        required=False,
        allow_blank=True,
        help_text=f"Default: FACTORS_UNITS_URL. {URL_RULE} A year needs a file or a URL.",
    )


class UnitSyncBody(UnitSyncUrlBody):
    file = UploadField(required=False, help_text=f"A directory file, CSV or JSON. {FILE_RULE}")


class RecalculateForm(serializers.Serializer):
    """The urlencoded form of ``RecalculateBody``: a form has no null."""

    year = _year(required=False, help_text="Only this year (also as ?year=).")


class RecalculateBody(RecalculateForm):
    year = _year(required=False, allow_null=True, help_text="Only this year (also as ?year=).")


ENTRY_TYPE = OpenApiParameter(
    "data_entry_type", str, OpenApiParameter.PATH, enum=DataEntryType.values, description="A data-entry type."
)


def _checked(name: str, field: serializers.Field, value: Any) -> Any:
    """``value`` as ``field`` takes it; a 400 naming ``name`` otherwise."""
    try:
        return field.run_validation(value)
    except ValidationError as exc:
        raise ValidationError({name: exc.detail}) from None


def _fields(request: Request, body: type[serializers.Serializer]) -> dict[str, Any]:
    """The request's fields as ``body`` declares them; a 400 naming each bad one."""
    data = object_body(request)
    if isinstance(data, QueryDict):  # a form: one value per field, files included
        data = data.dict()
    form = body(data=data)
    form.is_valid(raise_exception=True)
    return form.validated_data


# --- views ------------------------------------------------------------------------------------------

NO_MODULE = OpenApiResponse(ErrorSerializer, description="No such report module visible to you.")


@uploads.body_limit(conf.entries_max_bytes)
class Dispatch(APIView):
    """``POST /sync/dispatch``: an entries CSV for one report module and type."""

    permission_classes = [IsAuthenticated, Operates]
    operated_model = DataEntry
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        tags=["sync"],
        summary="Upload an entries CSV: csv_ingest → emission_recalc → aggregation",
        request={"multipart/form-data": DispatchBody},
        responses={
            202: DispatchedSerializer,
            400: OpenApiTypes.OBJECT,
            404: NO_MODULE,
            409: OpenApiResponse(description="An ingest of this module and type is unfinished."),
            413: OpenApiTypes.OBJECT,
        },
    )
    def post(self, request: Request) -> Response:
        _refuse_large_body(request, "entries")
        fields = _fields(request, DispatchBody)
        module = visible_module(request, fields["report"], fields["module"])
        upload = fields["file"]
        return _answer(
            lambda: services.dispatch_csv(
                module, fields["data_entry_type"], upload, filename=upload.name, actor=request.user
            )
        )


class ApiIngest(APIView):
    """``POST /sync/api-ingest``: entries from an HTTP JSON source, same rules and chain."""

    permission_classes = [IsAuthenticated, Operates]
    operated_model = DataEntry
    parser_classes = [BoundedJSONParser, FormParser]

    @extend_schema(
        tags=["sync"],
        summary="Ingest entries from an HTTP JSON source",
        request=ApiIngestBody,
        responses={
            202: DispatchedSerializer,
            400: OpenApiTypes.OBJECT,
            404: NO_MODULE,
            409: OpenApiTypes.OBJECT,
        },
    )
    def post(self, request: Request) -> Response:
        fields = _fields(request, ApiIngestBody)
        module = visible_module(request, fields["report"], fields["module"])
        return _answer(
            lambda: services.ingest_from_api(
                module, fields["data_entry_type"], fields["url"], actor=request.user
            )
        )


@uploads.body_limit(conf.factors_max_bytes)
class FactorUpload(APIView):
    """``POST /sync/factors/{data_entry_type}``: a factor CSV of one type."""

    permission_classes = [IsAuthenticated, Operates]
    operated_model = EmissionFactor
    platform_operation = True
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        tags=["sync"],
        summary="Upload emission factors of one type (upserted in place; recalculation follows)",
        request={"multipart/form-data": FactorUploadBody},
        parameters=[ENTRY_TYPE],
        responses={
            202: DispatchedSerializer,
            400: OpenApiTypes.OBJECT,
            409: OpenApiTypes.OBJECT,
            413: OpenApiTypes.OBJECT,
        },
    )
    def post(self, request: Request, data_entry_type: str) -> Response:
        _refuse_large_body(request, "factors")
        upload = _fields(request, FactorUploadBody)["file"]
        return _answer(
            lambda: services.upload_factors(data_entry_type, upload, filename=upload.name, actor=request.user)
        )


@uploads.body_limit(conf.units_max_bytes)
class UnitSync(APIView):
    """``POST /sync/units``: a directory file (multipart ``file``, CSV or JSON) or a JSON
    endpoint (``url``, default ``FACTORS_UNITS_URL``), for one ``year``."""

    permission_classes = [IsAuthenticated, Operates]
    operated_model = Unit
    platform_operation = True
    parser_classes = [MultiPartParser, FormParser, BoundedJSONParser]

    @extend_schema(
        tags=["sync"],
        summary="Sync units for a year (a real, tracked job)",
        request={
            "multipart/form-data": UnitSyncBody,
            "application/x-www-form-urlencoded": UnitSyncUrlBody,
            "application/json": UnitSyncUrlBody,
        },
        responses={
            202: DispatchedSerializer,
            400: OpenApiTypes.OBJECT,
            409: OpenApiTypes.OBJECT,
            413: OpenApiTypes.OBJECT,
        },
    )
    def post(self, request: Request) -> Response:
        _refuse_large_body(request, "units")
        fields = _fields(request, UnitSyncBody)
        upload = fields.get("file")
        return _answer(
            lambda: services.sync_units(
                fields["year"],
                source=upload,
                filename=getattr(upload, "name", ""),
                url=fields.get("url") or conf.units_url() or None,
                actor=request.user,
            )
        )


class Recalculate(APIView):
    """``POST /sync/recalculate-emissions/{data_entry_type}`` (optional ``year``)."""

    permission_classes = [IsAuthenticated, Operates]
    operated_model = EmissionFactor
    platform_operation = True
    parser_classes = [BoundedJSONParser, FormParser]

    @extend_schema(
        tags=["sync"],
        summary="Recalculate the emissions of a type",
        request={"application/json": RecalculateBody, "application/x-www-form-urlencoded": RecalculateForm},
        parameters=[
            ENTRY_TYPE,
            OpenApiParameter(
                "year",
                {"type": "integer", "minimum": 2000, "maximum": 2100},
                required=False,
                description="Only this year, 2000 to 2100.",
            ),
        ],
        responses={202: DispatchedSerializer, 200: DispatchedSerializer, 400: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request, data_entry_type: str) -> Response:
        year = _fields(request, RecalculateBody).get("year")
        if "year" in request.query_params:
            # Checked on its own, so a body's year never hides a bad ?year=; the body's,
            # when it gives one, is the year.
            asked = _checked("year", _year(), request.query_params["year"])
            year = asked if year is None else year
        return _answer(lambda: services.recalculate_emissions(data_entry_type, year=year, actor=request.user))


class PipelineDetail(APIView):
    """``GET /sync/pipelines/{pipeline_id}``: every job of the pipeline and the modules
    it works on."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        tags=["sync"],
        summary="A pipeline's jobs: state, progress, timings",
        responses={200: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, pipeline_id: Any) -> Response:
        pipeline = jobs.pipeline_jobs(pipeline_id, visible_jobs(request.user))
        if not pipeline:
            raise NotFound("no such pipeline visible to you")
        modules = queries.pipeline_modules(
            pipeline_id,
            scope_queryset(ReportModule.objects.all(), request.user, field="report__unit__tenant"),
        )
        busy = queries.recalculating(m.pk for m in modules)
        return Response(
            {
                "pipeline": str(pipeline_id),
                "state": jobs.pipeline_state(pipeline),
                "jobs": PipelineJobSerializer(pipeline, many=True, context={"request": request}).data,
                "modules": [
                    {
                        "id": m.pk,
                        "report": m.report_id,
                        "unit": m.report.unit.code,
                        "year": m.report.year,
                        "module_type": m.module_type,
                        "recalculating": m.pk in busy,
                    }
                    for m in modules
                ],
            }
        )
