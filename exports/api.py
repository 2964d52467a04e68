"""Exports in the REST API, under ``/api/exports/``: the mappings (read-only, with their
entities), the datasets an entity may name, and snapshots: take one of a mapping, list
and read them with their jobs, cancel one.

Views stay thin: they find what the caller may see (``tenancy.scoping``; another
tenant's mapping or snapshot answers like one that does not exist), call
``exports.services`` and report. Members read; staff take and cancel snapshots (the
rule of the ingest runs' API), and the service records who did. A mapping the service
refuses is a 400 naming ``mapping`` and why (an entity that is not one query, a catalog
the tenant's binding does not allow, a tenant without a binding). The Trino role is
not the caller's to choose: it is the tenant's binding, kept by platform operators. A
job's files are shown inside the snapshot's folder; platform operators see where they
are.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import Prefetch, QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import (
    Adds,
    ClosedSerializer,
    DateTimeFilter,
    ErrorSerializer,
    Operates,
    StrictFilterBackend,
    object_body,
)
from exports import services
from exports.datasets import DATASETS, Dataset
from exports.models import Engine, ExportJob, Mapping, MappingEntity, Snapshot, SnapshotStatus
from tenancy.scoping import scope_queryset, tenant_scope

MAX_ID = 2**63 - 1
NAME_LENGTH = Mapping._meta.get_field("name").max_length

# --- what the API shows -------------------------------------------------------------------------


class MappingEntitySerializer(serializers.ModelSerializer):
    columns = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="In the order the Parquet files have them."
    )

    class Meta:
        model = MappingEntity
        fields = ["id", "kind", "name", "position", "dataset", "sql", "catalog", "columns"]
        read_only_fields = fields


class MappingSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="tenant_id", read_only=True)
    entities = MappingEntitySerializer(many=True, read_only=True)

    class Meta:
        model = Mapping
        fields = ["id", "tenant", "name", "description", "created_at", "entities"]
        read_only_fields = fields


class ColumnSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.CharField(help_text="As Trino names it (bigint, varchar, decimal(18,6) …).")


class DatasetSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    columns = ColumnSerializer(many=True)


class ExportJobSerializer(serializers.ModelSerializer):
    """A job of a snapshot: one entity exported to a folder of Parquet files."""

    # Plain text: the same choices as an entity's kind, which the schema names once.
    type = serializers.CharField(source="job_type", read_only=True, help_text="node or edge")
    entity = serializers.CharField(source="entity_name", read_only=True)
    engine = serializers.ChoiceField(Engine.choices, read_only=True)
    error = serializers.CharField(source="error_message", read_only=True)
    engine_job = serializers.IntegerField(
        source="job_id",
        read_only=True,
        allow_null=True,
        help_text="The engine job that runs it (/api/jobs/<id>/: its claims, attempts and "
        "history); null once the engine's retention has pruned it.",
    )
    files = serializers.SerializerMethodField(
        help_text="Its Parquet files, as paths inside the snapshot's folder "
        "(nodes/<entity>/part-g1.parquet); platform operators see their full paths "
        "or URLs."
    )

    class Meta:
        model = ExportJob
        fields = [
            "id",
            "position",
            "type",
            "entity",
            "engine",
            "status",
            "engine_job",
            "claimed_by",
            "row_count",
            "size_bytes",
            "error",
            "next_poll_at",
            "poll_count",
            "files",
            "created_at",
            "completed_at",
        ]
        read_only_fields = fields

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_files(self, job: ExportJob) -> list[str]:
        request = self.context.get("request")
        if request is not None and tenant_scope(request.user) is True:
            return list(job.files)
        return [path for path in services.shown_files(job) if path]


class SnapshotSerializer(serializers.ModelSerializer):
    """A snapshot with its jobs, in listings too (a mapping has a handful of entities)."""

    tenant = serializers.IntegerField(source="tenant_id", read_only=True)
    mapping = serializers.IntegerField(source="mapping_id", read_only=True)
    mapping_name = serializers.CharField(source="mapping.name", read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    node_counts = serializers.DictField(
        child=serializers.IntegerField(), read_only=True, help_text="Rows per node entity, once finished."
    )
    edge_counts = serializers.DictField(
        child=serializers.IntegerField(), read_only=True, help_text="Rows per edge entity, once finished."
    )
    jobs = ExportJobSerializer(many=True, read_only=True)

    class Meta:
        model = Snapshot
        fields = [
            "id",
            "tenant",
            "mapping",
            "mapping_name",
            "status",
            "created_by",
            "created_at",
            "updated_at",
            "finished_at",
            "node_counts",
            "edge_counts",
            "size_bytes",
            "error",
            "jobs",
        ]
        read_only_fields = fields


class SnapshotRefusedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    snapshot = serializers.IntegerField()


# --- what a caller sends ------------------------------------------------------------------------


def _storable(text: str) -> bool:
    return "\x00" not in text and not any(0xD800 <= ord(char) <= 0xDFFF for char in text)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_ID},
            {"type": "string", "minLength": 1, "maxLength": NAME_LENGTH},
        ]
    }
)
class MappingReference(serializers.Field):
    """A mapping by id (a number) or by name (a string)."""

    default_error_messages = {
        "invalid": "a mapping's id (a number) or name (a string)",
        "range": f"an id is between 1 and {MAX_ID}",
        "name": f"a name of 1 to {NAME_LENGTH} characters",
    }

    def to_internal_value(self, data: Any) -> int | str:
        if isinstance(data, bool) or not isinstance(data, (int, str)):
            self.fail("invalid")
        if isinstance(data, int):
            if not 1 <= data <= MAX_ID:
                self.fail("range")
            return data
        if not 1 <= len(data) <= NAME_LENGTH or not _storable(data):
            self.fail("name")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class TakeSnapshotSerializer(ClosedSerializer):
    """The mapping to take a snapshot of; nothing else (an unknown field is a 400). Its
    Trino queries run under the role the tenant's binding names."""

    # Named, a field the operators bind answers more than "unknown field".
    refused_fields = {
        "starburst_role": "unknown field: the Trino role is bound to the tenant by platform "
        "operators, not chosen per snapshot",
    }

    mapping = MappingReference(help_text="The mapping, by id or by name (platform operators: by id).")


# --- listing rules --------------------------------------------------------------------------------


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": MAX_ID})
class IdFilter(filters.Filter):
    """An integer id (``NumberFilter`` would take 1.5 and round it)."""

    field_class = forms.IntegerField


class SnapshotFilter(filters.FilterSet):
    status = filters.MultipleChoiceFilter(
        choices=SnapshotStatus.choices, help_text="Repeat to match any of several."
    )
    mapping = IdFilter(field_name="mapping_id", min_value=1, max_value=MAX_ID, help_text="A mapping's id.")
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Snapshot
        fields: list[str] = []


def visible_mapping(user: Any, reference: int | str) -> Mapping:
    """The mapping the caller names, among those they may see; a 400 naming ``mapping``
    otherwise. Names are unique within a tenant only, so one who sees every tenant's
    mappings names one by its id."""
    mappings = scope_queryset(Mapping.objects.all(), user)
    if isinstance(reference, str):
        if tenant_scope(user) is True:
            raise ValidationError(
                {
                    "mapping": [
                        "a platform operator names a mapping by its id: names are unique within a tenant only"
                    ]
                }
            )
        found = mappings.filter(name=reference).first()
    else:
        found = mappings.filter(pk=reference).first()
    if found is None:
        raise ValidationError({"mapping": [f"unknown mapping {reference!r}"]})
    return found


def visible_snapshots(user: Any) -> QuerySet[Snapshot]:
    jobs = Prefetch("jobs", ExportJob.objects.order_by("position"))
    return scope_queryset(Snapshot.objects.select_related("mapping", "created_by"), user).prefetch_related(
        jobs
    )


def dataset_body(dataset: Dataset) -> dict[str, Any]:
    return {
        "name": dataset.name,
        "description": dataset.description,
        "columns": [{"name": column.name, "type": column.type} for column in dataset.columns],
    }


# --- the views -----------------------------------------------------------------------------------

NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such snapshot visible to you.")


@extend_schema(tags=["exports"])
@extend_schema_view(
    list=extend_schema(summary="List the mappings, newest first"),
    retrieve=extend_schema(summary="One mapping with its entities"),
)
class MappingViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Mappings of the caller's tenant (every tenant's for platform operators)."""

    serializer_class = MappingSerializer
    permission_classes = [IsAuthenticated]
    filter_backends = [StrictFilterBackend]
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[Mapping]:
        entities = Prefetch("entities", MappingEntity.objects.order_by("kind", "position", "id"))
        return scope_queryset(Mapping.objects.prefetch_related(entities), self.request.user)


class DatasetsView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        tags=["exports"],
        summary="The datasets a mapping entity may name, with their columns and types",
        responses={200: DatasetSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        return Response([dataset_body(DATASETS[name]) for name in sorted(DATASETS)])


@extend_schema(tags=["exports"])
@extend_schema_view(
    list=extend_schema(summary="List snapshots with their jobs, newest first"),
    retrieve=extend_schema(
        summary="One snapshot with its jobs", responses={200: SnapshotSerializer, 404: NOT_FOUND}
    ),
)
class SnapshotViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Snapshots of the caller's tenant (every tenant's for platform operators)."""

    serializer_class = SnapshotSerializer
    # Taking one needs exports.add_snapshot, as the admin's "Take a snapshot" does; its
    # actions need exports.operate_snapshot.
    permission_classes = [IsAuthenticated, Adds]
    added_model = operated_model = Snapshot
    filter_backends = [StrictFilterBackend]
    filterset_class = SnapshotFilter
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[Snapshot]:
        return visible_snapshots(self.request.user)

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        # Filters narrow the listing; a snapshot addressed by id answers whatever the query says.
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    def _body(self, snapshot: Snapshot) -> dict[str, Any]:
        fresh = visible_snapshots(self.request.user).get(pk=snapshot.pk)
        return SnapshotSerializer(fresh, context=self.get_serializer_context()).data

    @extend_schema(
        summary="Take a snapshot of a mapping (staff granted exports.add_snapshot)",
        request=TakeSnapshotSerializer,
        responses={201: SnapshotSerializer},
    )
    def create(self, request: Request) -> Response:
        form = TakeSnapshotSerializer(data=object_body(request))
        form.is_valid(raise_exception=True)
        mapping = visible_mapping(request.user, form.validated_data["mapping"])
        try:
            snapshot = services.create_snapshot(mapping, user=request.user, via="api")
        except services.InvalidMapping as exc:
            raise ValidationError({"mapping": [str(exc)]}) from None
        return Response(self._body(snapshot), status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Cancel a snapshot: its unfinished jobs fail (staff)",
        request=None,
        responses={
            200: SnapshotSerializer,
            404: NOT_FOUND,
            409: OpenApiResponse(SnapshotRefusedSerializer, description="Nothing to cancel: says why."),
        },
    )
    @action(detail=True, methods=["post"], permission_classes=[IsAuthenticated, Operates])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        snapshot = self.get_object()
        try:
            cancelled = services.cancel_snapshot(snapshot, request.user, via="api")
        except services.ActionRefused as exc:
            return self._refused(snapshot, str(exc))
        if not cancelled:
            snapshot.refresh_from_db(fields=["status"])
            return self._refused(
                snapshot, f"snapshot {snapshot.pk} has no unfinished job: it is {snapshot.status}"
            )
        return Response(self._body(snapshot))

    def _refused(self, snapshot: Snapshot, detail: str) -> Response:
        body = SnapshotRefusedSerializer({"detail": detail, "snapshot": snapshot.pk}).data
        return Response(body, status=status.HTTP_409_CONFLICT)
