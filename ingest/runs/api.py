"""Ingest runs in the REST API, under ``/api/ingest/runs/``: start a run of a source,
list and read runs with their batches and hook executions, and the operator actions
(cancel, retry the failed hooks, fetch again from the failed batch).

Views stay thin: they find what the caller may see (``tenancy.scoping``; another
tenant's run or source answers like one that does not exist), call
``ingest.runs.services`` and report. Members read; staff start runs and act on them, and
the service records who did, with ``via="api"``. A refusal of the service (a source
already running, a run already finished) is a 409 that names the run it is about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from console.api import (
    BoundedJSONParser,
    ClosedSerializer,
    DateTimeFilter,
    ErrorSerializer,
    ErrorTextField,
    NewestFirst,
    Operates,
    StrictFilterBackend,
    object_body,
)
from ingest.runs import services, timeline
from ingest.runs.models import (
    HookExecution,
    IngestBatch,
    IngestRun,
    IngestSource,
    RunAction,
    RunStatus,
)
from tenancy.scoping import scope_queryset

MAX_ID = 2**63 - 1

# --- what a run looks like --------------------------------------------------------------------


class IngestRunSerializer(serializers.ModelSerializer):
    """A run in a listing: its source, where it stands, and its figures."""

    tenant = serializers.IntegerField(source="tenant_id", read_only=True)
    source = serializers.CharField(source="source.name", read_only=True, help_text="The source's name.")
    source_id = serializers.IntegerField(read_only=True)
    started_by = serializers.CharField(source="started_by.username", read_only=True, allow_null=True)
    batches_fetched = serializers.IntegerField(source="batches_ingested", read_only=True)
    # A reason stored with a job's traceback (before reasons were stored without) shows
    # it to staff only, as the engine's own errors do.
    failure_reason = ErrorTextField()

    class Meta:
        model = IngestRun
        fields = [
            "id",
            "tenant",
            "source",
            "source_id",
            "status",
            "pipeline",
            "started_by",
            "started_at",
            "finished_at",
            "batches_fetched",
            "batches_published",
            "records_published",
            "hook_failures",
            "max_failures",
            "ingest_done",
            "failure_reason",
        ]
        read_only_fields = fields


class HookExecutionSerializer(serializers.ModelSerializer):
    hook = serializers.CharField(source="hook_name", read_only=True)
    entry = serializers.CharField(
        source="hook.template.name",
        read_only=True,
        allow_null=True,
        help_text="The hook's catalogue entry (null once the hook is removed from its source).",
    )
    job_name = serializers.CharField(
        source="runner_ref", read_only=True, help_text="The Kubernetes Job (or process) of the current try."
    )

    class Meta:
        model = HookExecution
        fields = [
            "hook",
            "entry",
            "position",
            "status",
            "tries",
            "runner_target",
            "job_name",
            "pod_phase",
            "exit_code",
            "reason",
            "log_tail",
            "launched_at",
            "finished_at",
        ]
        read_only_fields = fields


class HooksDeliverySerializer(serializers.Serializer):
    """The engine's job delivering a batch to its hooks, while it is still working (or
    once it failed): how many attempts, and when it tries again."""

    job = serializers.IntegerField(source="pk")
    state = serializers.CharField()
    attempts = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    deliver_after = serializers.DateTimeField(source="run_after")


class IngestBatchSerializer(serializers.ModelSerializer):
    hook_executions = HookExecutionSerializer(many=True, read_only=True)
    hooks_delivery = serializers.SerializerMethodField()

    class Meta:
        model = IngestBatch
        fields = [
            "id",
            "sequence",
            "status",
            "records",
            "has_more",
            "fetch_ms",
            "fetched_at",
            "checked_at",
            "published_at",
            "hook_executions",
            "hooks_delivery",
        ]
        read_only_fields = fields

    @extend_schema_field(HooksDeliverySerializer(allow_null=True))
    def get_hooks_delivery(self, batch: IngestBatch) -> dict[str, Any] | None:
        job = self.context.get("hook_deliveries", {}).get(batch.pk)
        return None if job is None else HooksDeliverySerializer(job).data


class BatchCountsSerializer(serializers.Serializer):
    fetched = serializers.IntegerField()
    checking = serializers.IntegerField()
    hooks_failed = serializers.IntegerField()
    checked = serializers.IntegerField()
    published = serializers.IntegerField()


class ExecutionCountsSerializer(serializers.Serializer):
    waiting = serializers.IntegerField()
    launching = serializers.IntegerField()
    running = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()


class IngestRunCountsSerializer(serializers.Serializer):
    batches = BatchCountsSerializer()
    hook_executions = ExecutionCountsSerializer()


class RunActionSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", read_only=True, allow_null=True)

    class Meta:
        model = RunAction
        # The history vocabulary (jobs.History), as every history of the API says it.
        fields = ["at", "kind", "from_status", "to_status", "actor", "via", "message", "detail"]
        read_only_fields = fields


class IngestRunDetailSerializer(IngestRunSerializer):
    """A run with its newest batches (each with its hook executions), counts by status,
    and what was done to it by whom."""

    counts = serializers.SerializerMethodField()
    batches = serializers.SerializerMethodField()
    earlier_batches = serializers.SerializerMethodField(
        help_text=f"Batches before the first one listed (at most {timeline.BATCH_LIMIT} are, the newest)."
    )
    actions = RunActionSerializer(many=True, read_only=True)

    class Meta(IngestRunSerializer.Meta):
        fields = [*IngestRunSerializer.Meta.fields, "counts", "batches", "earlier_batches", "actions"]
        read_only_fields = fields

    @extend_schema_field(IngestRunCountsSerializer)
    def get_counts(self, run: IngestRun) -> dict[str, dict[str, int]]:
        return timeline.counts(run)

    @extend_schema_field(IngestBatchSerializer(many=True))
    def get_batches(self, run: IngestRun) -> list[dict[str, Any]]:
        shown = self._timeline(run)
        return IngestBatchSerializer(
            shown.batches, many=True, context={"hook_deliveries": shown.hook_deliveries}
        ).data

    def get_earlier_batches(self, run: IngestRun) -> int:
        return self._timeline(run).earlier

    def _timeline(self, run: IngestRun) -> timeline.Timeline:
        cache = self.context.setdefault("_timelines", {})
        if run.pk not in cache:
            cache[run.pk] = timeline.load(run)
        return cache[run.pk]


class RunRefusedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    run = serializers.IntegerField(
        allow_null=True, help_text="The run the refusal is about: the one already running, or this one."
    )


# --- what a caller sends ------------------------------------------------------------------------


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_ID},
            {"type": "string", "minLength": 1, "maxLength": 64},
        ]
    }
)
class SourceReference(serializers.Field):
    """A source by id (a number) or by name (a string)."""

    default_error_messages = {
        "invalid": "a source's id (a number) or name (a string)",
        "range": f"an id is between 1 and {MAX_ID}",
        "name": "a name of 1 to 64 characters, without NUL",
    }

    def to_internal_value(self, data: Any) -> int | str:
        if isinstance(data, bool) or not isinstance(data, (int, str)):
            self.fail("invalid")
        if isinstance(data, int):
            if not 1 <= data <= MAX_ID:
                self.fail("range")
            return data
        if not 1 <= len(data) <= 64 or "\x00" in data:
            self.fail("name")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class StartRunSerializer(ClosedSerializer):
    source = SourceReference(help_text="The source, by id or by name.")
    tenant = serializers.SlugField(
        required=False,
        max_length=60,
        help_text="The source's tenant (slug), when a platform "
        "operator names a source that several tenants have.",
    )


class CancelRunSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=1000, help_text="Recorded with the cancellation."
    )


# --- listing rules --------------------------------------------------------------------------------


class RunFilter(filters.FilterSet):
    status = filters.MultipleChoiceFilter(
        choices=RunStatus.choices, help_text="Repeat to match any of several."
    )
    source = filters.CharFilter(field_name="source__name", help_text="A source's name, exactly.")
    started_after = DateTimeFilter(field_name="started_at", lookup_expr="gte")
    started_before = DateTimeFilter(field_name="started_at", lookup_expr="lt")

    class Meta:
        model = IngestRun
        fields: list[str] = []


def visible_runs(user: Any) -> QuerySet[IngestRun]:
    return scope_queryset(IngestRun.objects.select_related("source", "started_by"), user)


def sources_named(user: Any, reference: int | str, tenant: str | None) -> list[IngestSource]:
    """The sources ``user`` may see that ``reference`` names (an id or a name), within
    ``tenant`` (a slug) if given: none, one, or two when several tenants have the name
    (the caller then asks for the tenant). Another tenant's is as unknown as a missing one."""
    if "\x00" in str(reference) or "\x00" in (tenant or ""):
        return []  # no name or slug holds a NUL (PostgreSQL's text cannot)
    sources = scope_queryset(IngestSource.objects.all(), user)
    if tenant:
        sources = sources.filter(tenant__slug=tenant)
    key = {"pk": reference} if isinstance(reference, int) else {"name": reference}
    return list(sources.filter(**key)[:2])


def visible_source(user: Any, reference: int | str, tenant: str | None) -> IngestSource:
    """The source the caller names, among those they may see; a 400 naming ``source``
    otherwise."""
    found = sources_named(user, reference, tenant)
    if not found:
        raise ValidationError({"source": [f"unknown source {reference!r}"]})
    if len(found) > 1:
        raise ValidationError(
            {"source": [f"several tenants have a source named {reference!r}; give its id, or its tenant"]}
        )
    return found[0]


def refused(exc: services.RunRefused) -> Response:
    body = {"detail": str(exc), "run": exc.run.pk if exc.run is not None else None}
    return Response(RunRefusedSerializer(body).data, status=status.HTTP_409_CONFLICT)


# --- the views -----------------------------------------------------------------------------------

NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such run visible to you.")
REFUSED = OpenApiResponse(
    RunRefusedSerializer, description="The run's (or its source's) state does not allow it now; says why."
)


def _action_schema(summary: str, request: Any = None) -> Callable[[Any], Any]:
    return extend_schema(
        summary=summary,
        request=request,
        responses={200: IngestRunDetailSerializer, 404: NOT_FOUND, 409: REFUSED},
    )


@extend_schema(tags=["ingest"])
@extend_schema_view(
    list=extend_schema(summary="List ingest runs, newest first"),
    retrieve=extend_schema(
        summary="One run with its batches, hook executions and actions",
        responses={200: IngestRunDetailSerializer, 404: NOT_FOUND},
    ),
)
class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Ingest runs of the caller's tenant (every tenant's for platform operators)."""

    # Starting a run, as every action on one, needs ingest.operate_ingestrun: the admin's
    # "Start a run" is an operation too.
    permission_classes = [IsAuthenticated, Operates]
    operated_model = IngestRun
    pagination_class = NewestFirst
    filter_backends = [StrictFilterBackend]
    filterset_class = RunFilter
    parser_classes = [BoundedJSONParser]
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[IngestRun]:
        runs = visible_runs(self.request.user)
        if self.action == "retrieve":
            runs = runs.prefetch_related("actions__actor")
        return runs

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        # Filters narrow the listing; a run addressed by id answers whatever the query says.
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        return IngestRunSerializer if self.action == "list" else IngestRunDetailSerializer

    def _detail(self, run: IngestRun) -> dict[str, Any]:
        run = visible_runs(self.request.user).prefetch_related("actions__actor").get(pk=run.pk)
        return IngestRunDetailSerializer(run, context=self.get_serializer_context()).data

    @extend_schema(
        summary="Start a run of a source (staff granted ingest.operate_ingestrun)",
        request=StartRunSerializer,
        responses={201: IngestRunDetailSerializer, 400: OpenApiTypes.OBJECT, 409: REFUSED},
    )
    def create(self, request: Request) -> Response:
        form = StartRunSerializer(data=object_body(request))
        form.is_valid(raise_exception=True)
        source = visible_source(
            request.user, form.validated_data["source"], form.validated_data.get("tenant")
        )
        try:
            run = services.start_ingest(source, actor=request.user, via="api")
        except services.RunRefused as exc:
            return refused(exc)
        return Response(self._detail(run), status=status.HTTP_201_CREATED)

    def _act(self, change: Callable[[IngestRun], Any]) -> Response:
        run = self.get_object()
        try:
            change(run)
        except services.RunRefused as exc:
            return refused(exc)
        return Response(self._detail(run))

    @_action_schema("Cancel a running run (staff)", request=CancelRunSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsAuthenticated, Operates])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        form = CancelRunSerializer(data=object_body(request))
        form.is_valid(raise_exception=True)
        reason = form.validated_data.get("reason", "")
        return self._act(lambda run: services.cancel_run(run, actor=request.user, via="api", reason=reason))

    @_action_schema("Run the hooks again on every batch whose hooks failed (staff)")
    @action(
        detail=True, methods=["post"], url_path="retry-hooks", permission_classes=[IsAuthenticated, Operates]
    )
    def retry_hooks(self, request: Request, pk: str | None = None) -> Response:
        return self._act(lambda run: services.retry_failed_hooks(run, actor=request.user, via="api"))

    @_action_schema("Fetch again from the batch the source failed on (staff)")
    @action(
        detail=True,
        methods=["post"],
        url_path="retry-from-batch",
        permission_classes=[IsAuthenticated, Operates],
    )
    def retry_from_batch(self, request: Request, pk: str | None = None) -> Response:
        return self._act(lambda run: services.retry_from_failed_batch(run, actor=request.user, via="api"))
