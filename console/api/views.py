"""The REST API's views over the engine: jobs (list, detail, enqueue, operator actions,
dashboard) and events with their deliveries.

Views stay thin: validate, call ``jobs.engine`` or ``console.dashboard``, report. Every
queryset goes through ``tenancy.scoping.scope_queryset``, so another tenant's job answers
404 exactly like a job that does not exist: its data and its existence stay hidden.
Reads need a logged-in member; every write needs staff. Listing rules (cursor pages,
strict filters) live in ``console.api.pagination`` and ``console.api.filters``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Count, Prefetch, Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from console import dashboard
from console.api.filters import (
    EventFilter,
    JobFilter,
    StrictFilterBackend,
    StrictOrderingFilter,
    reject_unknown,
)
from console.api.pagination import NewestFirst
from console.api.permissions import Adds, Operates
from console.api.scoping import visible_jobs
from console.api.serializers import (
    ActionSerializer,
    DashboardSerializer,
    EnqueueSerializer,
    ErrorSerializer,
    EventDetailSerializer,
    EventSerializer,
    JobDetailSerializer,
    JobSerializer,
)
from jobs import engine
from jobs.errors import IllegalTransition, InvalidArgument, UnknownJobType
from jobs.models import Delivery, Event, Job, JobEvent
from tenancy.scoping import scope_queryset, tenant_scope

# --- errors and permissions --------------------------------------------------------------


class Conflict(APIException):
    """The job's state does not allow the change (the engine's IllegalTransition)."""

    status_code = 409
    default_detail = "The job's current state does not allow this."
    default_code = "conflict"


# --- views -------------------------------------------------------------------------------

NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such job visible to you.")
FORBIDDEN = OpenApiResponse(ErrorSerializer, description="Not permitted: says which permission it needs.")
CONFLICT = OpenApiResponse(ErrorSerializer, description="The job's state does not allow it.")


def _action_schema(summary: str) -> Callable[[Any], Any]:
    return extend_schema(
        summary=summary,
        request=ActionSerializer,
        responses={200: JobDetailSerializer, 403: FORBIDDEN, 404: NOT_FOUND, 409: CONFLICT},
    )


# The job actions need jobs.operate_job, as the admin's buttons and the commands do.
OPERATES = [IsAuthenticated, Operates]


class ScopedViewSet(viewsets.GenericViewSet):
    permission_classes = [IsAuthenticated]
    pagination_class = NewestFirst
    filter_backends = [StrictFilterBackend, StrictOrderingFilter]
    ordering_fields = ["id"]
    ordering = ["-id"]
    lookup_value_regex = r"\d+"

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        # Filters narrow listings; a detail or an action addresses one row by id and must
        # not answer 404 or 400 because of a stray query parameter.
        if self.action != "list":
            return queryset
        return super().filter_queryset(queryset)


@extend_schema(tags=["jobs"])
@extend_schema_view(
    list=extend_schema(summary="List jobs, newest first"),
    retrieve=extend_schema(
        summary="One job with its 'why' line and history",
        responses={200: JobDetailSerializer, 404: NOT_FOUND},
    ),
)
class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """Jobs of the caller's tenant (every tenant's for platform operators)."""

    filterset_class = JobFilter
    # Enqueueing needs jobs.add_job (the admin adds no job: the API is where jobs are
    # added by hand); the actions need jobs.operate_job.
    permission_classes = [IsAuthenticated, Adds]
    added_model = operated_model = Job
    throttle_scope: str | None = None  # the dashboard action's own rate (ScopedThrottle)

    def get_queryset(self) -> QuerySet[Job]:
        return visible_jobs(self.request.user).select_related("created_by")

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        return JobSerializer if self.action == "list" else JobDetailSerializer

    # JSON only: a form can carry neither the payload object nor a null.
    @extend_schema(
        summary="Enqueue a job (staff granted jobs.add_job)",
        request={"application/json": EnqueueSerializer},
        responses={
            201: JobDetailSerializer,
            200: JobDetailSerializer,
            400: OpenApiTypes.OBJECT,
            403: FORBIDDEN,
            409: CONFLICT,
        },
    )
    def create(self, request: Request) -> Response:
        """201 with the new job; 200 with the unfinished job already holding
        ``unique_key`` (idempotent enqueue; keys are per tenant)."""
        scope = tenant_scope(request.user)
        if scope is False or scope is None:
            raise PermissionDenied("You belong to no tenant, so a job would be nobody's.")
        form = EnqueueSerializer(data=request.data, context={"scope": scope, "request": request})
        form.is_valid(raise_exception=True)
        job, created = self._enqueue(form.validated_data, request)
        return Response(self._detail(job), status=201 if created else 200)

    def _enqueue(self, data: dict[str, Any], request: Request) -> tuple[Job, bool]:
        """The job and whether this request created it: with a unique key held by an
        unfinished job, that job (the database decides, under concurrency too)."""
        options = {
            "queue": data.get("queue"),
            "priority": data["priority"],
            "run_after": data.get("run_after"),
            "concurrency_key": data.get("concurrency_key"),
            "tenant": data["tenant"],
            "created_by": request.user,
        }
        try:
            if data.get("unique_key"):
                done = engine.enqueue_once(
                    data["type"], data["payload"], unique_key=data["unique_key"], **options
                )
                return done.job, done.created
            return engine.enqueue(data["type"], data["payload"], **options), True
        except UnknownJobType as exc:
            raise ValidationError({"type": [str(exc)]}) from exc
        except InvalidArgument as exc:
            raise ValidationError({exc.argument: [str(exc)]}) from exc

    def _detail(self, job: Job) -> dict[str, Any]:
        return JobDetailSerializer(job, context=self.get_serializer_context()).data

    def _act(self, request: Request, change: Callable[..., Job]) -> Response:
        job = self.get_object()
        form = ActionSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            job = change(job, actor=request.user, reason=form.validated_data.get("reason", ""), via="api")
        except IllegalTransition as exc:
            raise Conflict(str(exc)) from exc
        return Response(self._detail(job))

    @_action_schema("Recover a stuck running job: pending again now (staff)")
    @action(detail=True, methods=["post"], permission_classes=OPERATES)
    def recover(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, engine.recover)

    @_action_schema("Retry a failed or cancelled job from scratch (staff)")
    @action(detail=True, methods=["post"], permission_classes=OPERATES)
    def retry(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, engine.retry)

    @_action_schema("Cancel a pending or running job (staff)")
    @action(detail=True, methods=["post"], permission_classes=OPERATES)
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, engine.cancel)

    @_action_schema("Make a waiting pending job due now (staff)")
    @action(detail=True, methods=["post"], url_path="run-now", permission_classes=OPERATES)
    def run_now(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, engine.run_now)

    @extend_schema(
        summary="Per-type throughput, durations and failures over a window; queue lag",
        parameters=[OpenApiParameter("window", str, enum=list(dashboard.WINDOWS), default="1h")],
        responses={
            200: DashboardSerializer,
            400: OpenApiTypes.OBJECT,
            429: OpenApiResponse(
                ErrorSerializer, description="Over the dashboard rate: wait the seconds its Retry-After says."
            ),
        },
    )
    # Its own, tighter rate per user (THROTTLE_DASHBOARD_RATE): each call aggregates a
    # window of the job history; the admin's dashboard page shares the count.
    @action(
        detail=False, methods=["get"], pagination_class=None, filter_backends=[], throttle_scope="dashboard"
    )
    def dashboard(self, request: Request) -> Response:
        window = request.query_params.get("window", "1h")
        errors = reject_unknown(request.query_params, {"window", api_settings.URL_FORMAT_OVERRIDE})
        try:
            dashboard.parse_window(window)
        except ValueError as exc:
            errors["window"] = [str(exc)]
        if errors:
            raise ValidationError(errors)
        figures = dashboard.figures(
            window,
            jobs=visible_jobs(request.user),
            events=scope_queryset(JobEvent.objects.all(), request.user, field="job__tenant"),
        )
        return Response(DashboardSerializer(figures).data)


@extend_schema_view(
    recover=extend_schema(
        operation_id="sync_jobs_recover", summary="Recover a stuck job at the manual recovery route (staff)"
    )
)
class SyncJobViewSet(JobViewSet):
    """``POST /sync/jobs/{id}/recover``: the manual recovery route operators' scripts already call; the
    same view as ``/api/jobs/{id}/recover/``, and the same permission (routed by hand, it
    does not get the action's own)."""

    permission_classes = [IsAuthenticated, Operates]


def _delivery_counts() -> dict[str, Count]:
    counts = {"deliveries_total": Count("deliveries")}
    for state in Job.State.values:
        counts[f"deliveries_{state}"] = Count("deliveries", filter=Q(deliveries__job__state=state))
    return counts


@extend_schema(tags=["events"])
@extend_schema_view(
    list=extend_schema(summary="List published events with delivery counts"),
    retrieve=extend_schema(
        summary="One event with its deliveries", responses={200: EventDetailSerializer, 404: NOT_FOUND}
    ),
)
class EventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """Published events of the caller's tenant and how their deliveries are doing."""

    filterset_class = EventFilter

    def get_queryset(self) -> QuerySet[Event]:
        events = Event.objects.select_related("created_by").annotate(**_delivery_counts())
        if self.action == "retrieve":
            deliveries = Delivery.objects.select_related("job").order_by("subscriber")
            events = events.prefetch_related(Prefetch("deliveries", queryset=deliveries))
        return scope_queryset(events, self.request.user)

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        return EventSerializer if self.action == "list" else EventDetailSerializer
