"""The scraper's API: ``POST /scraping/{source}/sync``, ``GET /scraping/{source}/handoffs``
and the operators' ``POST /scraping/{source}/handoffs/redrive``.

``{source}`` is a source's name among those the caller may see (``?tenant=<slug>`` for a
platform operator when several tenants have the name); another tenant's source answers
404 like one that does not exist. Staff sync (the scraper's account is staff of its
tenant); members read handoffs; staff granted ``ingest.operate_ingestionhandoff``
redrive them.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import (
    Adds,
    BoundedJSONParser,
    ClosedSerializer,
    ErrorSerializer,
    ErrorTextField,
    NewestFirst,
    Operates,
    StreamedJSONParser,
    StrictFilterBackend,
    StrictLimitOffset,
    object_body,
)
from ingest import conf
from ingest.runs.api import sources_named
from ingest.runs.models import IngestSource
from ingest.scraping import reading, services
from ingest.scraping.ingester import ScrapedReference
from ingest.scraping.models import (
    SCRAPE_RUN_ID_LENGTH,
    HandoffReason,
    HandoffStatus,
    IngestionHandoff,
    ScrapeReference,
)
from intake.uploads import body_limit


class Unavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = (
        "Handoffs are unavailable: their tables are not migrated (ingest 0003). Syncs still store references."
    )
    default_code = "handoffs_unavailable"


class TooManyReferences(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_many_references"


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class SyncBodyParser(StreamedJSONParser):
    """A sync's body: up to ``INGEST_SCRAPE_MAX_BYTES`` of JSON (the web server's limit
    for ``/scraping/`` too), read as it arrives. Each reference is checked and reduced to
    its canonical text and hash as soon as it is complete, and the one past
    ``SCRAPE_MAX_REFERENCES`` is refused before another is built: a body of many small
    items never becomes many Python objects at once."""

    max_bytes_setting = "INGEST_SCRAPE_MAX_BYTES"
    streamed_field = "references"

    def read_item(self, index: int, item: Any) -> reading.Reference:
        limit = reading.max_references()
        if index >= limit:
            raise TooManyReferences(str(reading.too_many(f"at least {index + 1:,}", limit)))
        try:
            return reading.read_reference(index, item)
        except reading.SyncRefused as exc:
            raise ValidationError({exc.field: [str(exc)]}) from None


def visible_source(request: Request, name: str) -> IngestSource:
    """The source named in the URL, among those the caller may see; 404 otherwise."""
    found = sources_named(request.user, name, request.query_params.get("tenant"))
    if not found:
        raise NotFound("No such source visible to you.")
    if len(found) > 1:
        raise ValidationError(
            {"tenant": [f"several tenants have a source named {name!r}; name its tenant with ?tenant=<slug>"]}
        )
    return found[0]


# --- sync -------------------------------------------------------------------------------------


class ReferenceSerializer(ClosedSerializer):
    """Documentation of an item; ``services.read_references`` checks it. Its
    ``external_id`` comes once per sync (a 400 naming the second one)."""

    external_id = serializers.CharField(min_length=1, max_length=255)
    payload = serializers.DictField(
        help_text="A JSON object; its hash (SHA-256 of canonical JSON) is computed here."
    )


class SyncRequestSerializer(ClosedSerializer):
    """Documentation of the body; the references are checked by ``services.read_references``
    (a serializer per item would cost more than the whole sync)."""

    scrape_run_id = serializers.CharField(min_length=1, max_length=SCRAPE_RUN_ID_LENGTH)
    references = ReferenceSerializer(many=True)


class SkippedReasonsSerializer(serializers.Serializer):
    payload_unchanged = serializers.IntegerField(required=False)
    ingestion_job_already_active = serializers.IntegerField(required=False)


class SyncResponseSerializer(serializers.Serializer):
    scrape_run_id = serializers.CharField()
    references_received = serializers.IntegerField()
    references_created = serializers.IntegerField()
    references_changed = serializers.IntegerField()
    references_unchanged = serializers.IntegerField()
    handoff_queued_count = serializers.IntegerField(allow_null=True)
    handoff_completed_count = serializers.IntegerField(allow_null=True)
    handoff_failed_count = serializers.IntegerField(allow_null=True)
    handoff_skipped_count = serializers.IntegerField(allow_null=True)
    handoff_skipped_reasons = SkippedReasonsSerializer(allow_null=True)
    handoffs_unavailable = serializers.CharField(required=False)


@body_limit(conf.scrape_max_bytes)
class Sync(APIView):
    """``POST /scraping/{source}/sync``: store a scrape run's references and hand each new
    payload off to ingestion (``ingest.scraping.services.sync``), in one transaction."""

    # A sync adds references (the admin adds none by hand): ingest.add_scrapereference.
    permission_classes = [IsAuthenticated, Adds]
    added_model = ScrapeReference
    parser_classes = [SyncBodyParser]

    @extend_schema(
        tags=["scraping"],
        summary="Sync a scrape run's references and hand them off",
        request=SyncRequestSerializer,
        parameters=[
            OpenApiParameter(
                "tenant",
                OpenApiTypes.STR,
                required=False,
                description="The source's tenant (slug), for a platform "
                "operator when several tenants have the name.",
            )
        ],
        responses={
            200: SyncResponseSerializer,
            400: OpenApiResponse(OpenApiTypes.OBJECT, description="A bad body: each field named, with why."),
            404: OpenApiResponse(ErrorSerializer, description="No such source."),
            409: OpenApiResponse(ErrorSerializer, description="The source takes no scraped references."),
            413: OpenApiResponse(ErrorSerializer, description="More references than a sync may bring."),
        },
    )
    def post(self, request: Request, source: str) -> Response:
        found = visible_source(request, source)
        if found.kind != ScrapedReference.kind:
            raise Conflict(
                f"source {found.name!r} takes no scraped references: its ingester is "
                f"{found.kind!r}, not {ScrapedReference.kind!r}"
            )
        body = object_body(request)
        unknown = sorted(set(body) - {"scrape_run_id", "references"})
        if unknown:
            raise ValidationError({name: ["unknown field"] for name in unknown})
        if "references" not in body:
            raise ValidationError({"references": ["This field is required."]})
        try:
            result = services.sync(found, body.get("scrape_run_id"), body["references"], actor=request.user)
        except services.SyncRefused as exc:
            if exc.too_many:
                raise TooManyReferences(str(exc)) from None
            raise ValidationError({exc.field: [str(exc)]}) from None
        answer: dict[str, Any] = {
            "scrape_run_id": result.scrape_run.run_id,
            "references_received": result.received,
            "references_created": result.created,
            "references_changed": result.changed,
            "references_unchanged": result.unchanged,
        }
        if result.handoffs is None:
            answer.update(
                handoff_queued_count=None,
                handoff_completed_count=None,
                handoff_failed_count=None,
                handoff_skipped_count=None,
                handoff_skipped_reasons=None,
                handoffs_unavailable=str(Unavailable.default_detail),
            )
        else:
            answer.update(services.json_counts(result.handoffs))
        return Response(answer)


# --- handoffs ---------------------------------------------------------------------------------


class HandoffSerializer(serializers.ModelSerializer):
    external_id = serializers.CharField(source="reference.external_id", read_only=True)
    scrape_run_id = serializers.CharField(source="scrape_run.run_id", read_only=True)
    reason = serializers.CharField(
        source="get_reason_code_display", read_only=True, help_text="The reason code in words."
    )
    # A failed handoff's error is its ingest run's failure reason, which held a job's
    # traceback before reasons were stored without: staff only, as the engine's errors.
    last_error = ErrorTextField()

    class Meta:
        model = IngestionHandoff
        fields = [
            "id",
            "reference_id",
            "external_id",
            "payload_hash",
            "scrape_run_id",
            "status",
            "reason_code",
            "reason",
            "attempts",
            "last_error",
            "job_id",
            "ingest_run_id",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class HandoffFilter(filters.FilterSet):
    status = filters.ChoiceFilter(choices=HandoffStatus.choices)
    scrape_run_id = filters.CharFilter(
        field_name="scrape_run__run_id",
        max_length=SCRAPE_RUN_ID_LENGTH,
        help_text="The scraper's run id, exactly.",
    )

    class Meta:
        model = IngestionHandoff
        fields: list[str] = []


class HandoffPages(NewestFirst):
    """The engine's keyset pages (``cursor``, ``page_size``), which cost an index range
    scan at any depth; or, for a client that asks with ``limit`` or ``offset``, those
    pages with their ``count``, which counts every handoff of the source on each page."""

    limit_query_param = StrictLimitOffset.limit_query_param
    offset_query_param = StrictLimitOffset.offset_query_param

    def __init__(self) -> None:
        super().__init__()
        self.by_offset: StrictLimitOffset | None = None

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        offset_pages = {self.limit_query_param, self.offset_query_param} & set(request.query_params)
        cursor_pages = {self.cursor_query_param, self.page_size_query_param} & set(request.query_params)
        if offset_pages and cursor_pages:
            raise ValidationError(
                {
                    name: ["page by cursor and page_size, or by limit and offset, not both"]
                    for name in offset_pages
                }
            )
        if offset_pages:
            self.by_offset = StrictLimitOffset()
            return self.by_offset.paginate_queryset(queryset, request, view)
        return super().paginate_queryset(queryset, request, view)

    def get_paginated_response(self, data: Any) -> Response:
        if self.by_offset is not None:
            return self.by_offset.get_paginated_response(data)
        return super().get_paginated_response(data)

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        paged = super().get_paginated_response_schema(schema)
        count = {"type": "integer", "description": "All matching handoffs (limit and offset pages only)."}
        return {**paged, "properties": {"count": count, **paged["properties"]}}

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            *super().get_schema_operation_parameters(view),
            *StrictLimitOffset().get_schema_operation_parameters(view),
        ]


# Every scraper address takes a sync's body, as the web server has always bounded them.
@body_limit(conf.scrape_max_bytes)
class Handoffs(generics.ListAPIView):
    """``GET /scraping/{source}/handoffs``: the source's handoffs, newest first, in keyset
    pages (or limit and offset ones, ``HandoffPages``)."""

    permission_classes = [IsAuthenticated]
    serializer_class = HandoffSerializer
    filter_backends = [StrictFilterBackend]
    filterset_class = HandoffFilter
    pagination_class = HandoffPages
    query_parameters = ["tenant"]  # read by visible_source, not a filter

    @extend_schema(
        tags=["scraping"],
        summary="List a source's handoffs, newest first",
        parameters=[
            OpenApiParameter(
                "tenant",
                OpenApiTypes.STR,
                required=False,
                description="The source's tenant (slug), for a platform operator when "
                "several tenants have the name.",
            )
        ],
        responses={
            200: HandoffSerializer(many=True),
            400: OpenApiResponse(OpenApiTypes.OBJECT, description="A bad filter or page, named."),
            404: OpenApiResponse(ErrorSerializer, description="No such source."),
            503: OpenApiResponse(ErrorSerializer, description="Handoff tables not migrated."),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[IngestionHandoff]:
        if getattr(self, "swagger_fake_view", False):
            return IngestionHandoff.objects.none()
        source = visible_source(self.request, self.kwargs["source"])
        if not services.handoffs_available():
            raise Unavailable()
        return (
            IngestionHandoff.objects.filter(source=source)
            .select_related("reference", "scrape_run")
            .order_by("-id")
        )


# --- redrive ----------------------------------------------------------------------------------


class RedriveRequestSerializer(ClosedSerializer):
    """Which of the source's failed handoffs to queue again; ``dry_run`` only counts
    them and shows the oldest."""

    dry_run = serializers.BooleanField(default=False)
    status = serializers.ChoiceField(
        choices=[HandoffStatus.FAILED.value],
        default=HandoffStatus.FAILED.value,
        help_text="Only failed handoffs are redriven (the others are still on their way, or done).",
    )
    scrape_run_id = serializers.CharField(
        min_length=1, max_length=SCRAPE_RUN_ID_LENGTH, required=False, help_text="The scraper's run id."
    )
    reason = serializers.ListField(
        child=serializers.ChoiceField(choices=HandoffReason.choices),
        required=False,
        max_length=len(HandoffReason.values),
        help_text="Reason codes, any of which matches (retry_exhausted, queue_refused …).",
    )
    older_than = serializers.IntegerField(
        min_value=0,
        max_value=services.MAX_AGE_SECONDS,
        required=False,
        help_text="Seconds since the handoff last changed, at least (with failed_before, both hold).",
    )
    failed_before = serializers.DateTimeField(
        required=False,
        help_text="Handoffs last changed before this; a redrive's answer gives it: send it "
        "again to go on where the redrive stopped.",
    )
    note = serializers.CharField(
        max_length=500, required=False, allow_blank=True, help_text="Why, on each handoff's history."
    )

    def validate_failed_before(self, value: Any) -> Any:
        try:
            return value.astimezone(UTC)
        except (OverflowError, ValueError):
            raise serializers.ValidationError("out of range") from None


class RedriveResponseSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    count = serializers.IntegerField(help_text="Matching handoffs (dry run), or those queued again.")
    sample = HandoffSerializer(many=True, help_text="The oldest matching handoffs (dry run).")
    failed_before = serializers.DateTimeField(help_text="The redrive's bound: send it again to resume.")
    queued = serializers.IntegerField(help_text="Queued with an ingestion job now.")
    waiting = serializers.IntegerField(help_text="Waiting for their reference's ingestion in progress.")
    batches = serializers.IntegerField(help_text="Transactions run.")
    remaining = serializers.IntegerField(help_text="Still matching: send the request again.")


@body_limit(conf.scrape_max_bytes)
class Redrive(APIView):
    """``POST /scraping/{source}/handoffs/redrive``: queue the source's failed handoffs
    that match a filter again (``services.redrive``), bounded per transaction, audited
    with the caller and ``via="api"``."""

    permission_classes = [IsAuthenticated, Operates]
    operated_model = IngestionHandoff
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        tags=["scraping"],
        summary="Redrive a source's failed handoffs (staff granted ingest.operate_ingestionhandoff)",
        request=RedriveRequestSerializer,
        parameters=[
            OpenApiParameter(
                "tenant",
                OpenApiTypes.STR,
                required=False,
                description="The source's tenant (slug), for a platform operator when "
                "several tenants have the name.",
            )
        ],
        responses={
            200: RedriveResponseSerializer,
            400: OpenApiResponse(OpenApiTypes.OBJECT, description="A bad filter, named."),
            404: OpenApiResponse(ErrorSerializer, description="No such source."),
            503: OpenApiResponse(ErrorSerializer, description="Handoff tables not migrated."),
        },
    )
    def post(self, request: Request, source: str) -> Response:
        found = visible_source(request, source)
        if not services.handoffs_available():
            raise Unavailable()
        form = RedriveRequestSerializer(data=object_body(request))
        form.is_valid(raise_exception=True)
        given = form.validated_data
        older_than = given.get("older_than")
        chosen = services.RedriveFilter(
            found,
            scrape_run_id=given.get("scrape_run_id"),
            reasons=tuple(given.get("reason", ())),
            failed_before=given.get("failed_before"),
            older_than=timedelta(seconds=older_than) if older_than is not None else None,
        )
        answer: dict[str, Any]
        if given["dry_run"]:
            seen = services.preview_redrive(chosen)
            answer = {
                "count": seen.count,
                "sample": seen.sample,
                "failed_before": seen.failed_before,
                "queued": 0,
                "waiting": 0,
                "batches": 0,
                "remaining": seen.count,
            }
        else:
            done = services.redrive(
                chosen,
                actor=request.user,
                via="api",
                note=given.get("note", ""),
                max_batches=services.REQUEST_BATCHES,
            )
            answer = {
                "count": done.count,
                "sample": [],
                "failed_before": done.failed_before,
                "queued": done.queued,
                "waiting": done.waiting,
                "batches": done.batches,
                "remaining": done.remaining,
            }
        answer["dry_run"] = given["dry_run"]
        return Response(RedriveResponseSerializer(answer, context=self.get_serializer_context()).data)

    def get_serializer_context(self) -> dict[str, Any]:
        return {"request": self.request, "view": self}
