"""The API's serializers: jobs (listing, detail with history, enqueueing, actions), the
dashboard's figures, and events with their deliveries.

A job error or event message goes out through ``ErrorTextField``, which shows a traceback
to staff only (``jobs.redaction``). A payload an API client enqueues is validated by the
job type's own serializer, for the job's tenant (``jobs.ApiPayload``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from jobs import registry
from jobs.models import Delivery, Event, Job, JobEvent
from jobs.redaction import error_text_for
from jobs.why import explain
from tenancy.models import Tenant

# A job's detail shows at most this many history rows (the newest): a long job's
# progress steps must not turn one GET into megabytes.
HISTORY_LIMIT = 500


class ClosedSerializer(serializers.Serializer):
    """A request body that refuses a field it does not declare, with a 400 naming it (a
    misspelt optional field must not be silently dropped), and whose schema says so with
    ``additionalProperties: false`` (``ClosedSerializerSchema``). ``refused_fields`` gives
    the message for a field a caller may not send and should know why."""

    refused_fields: ClassVar[dict[str, str]] = {}

    def to_internal_value(self, data: Any) -> Any:
        known = set(self.fields)
        unknown = sorted(name for name in getattr(data, "keys", dict)() if name not in known)
        if unknown:
            raise ValidationError(
                {name: [self.refused_fields.get(name, "unknown field")] for name in unknown}
            )
        return super().to_internal_value(data)


class ClosedSerializerSchema(OpenApiSerializerExtension):
    """drf-spectacular: a ``ClosedSerializer`` is an object with no properties but its own."""

    target_class = ClosedSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return {**schema, "additionalProperties": False}


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class ErrorTextField(serializers.CharField):
    """A job error or event message as the reader may see it (``jobs.redaction``): staff
    get the traceback, everyone else the message. Without a request in the serializer's
    context nobody is known to be staff, so the traceback is left out."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, value: Any) -> str:
        request = self.context.get("request")
        return error_text_for(getattr(request, "user", None), str(value))


class ProgressSerializer(serializers.Serializer):
    done = serializers.IntegerField(source="progress_done")
    total = serializers.IntegerField(source="progress_total", allow_null=True)
    message = serializers.CharField(source="progress_message")
    percent = serializers.SerializerMethodField()

    def get_percent(self, job: Job) -> float | None:
        if not job.progress_total:
            return None
        return round(100 * job.progress_done / job.progress_total, 1)


class JobEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", allow_null=True, read_only=True)
    message = ErrorTextField()

    class Meta:
        model = JobEvent
        # The history vocabulary (jobs.History) every history of the API shares, then
        # the job's own columns.
        fields = [
            "id",
            "at",
            "kind",
            "from_status",
            "to_status",
            "actor",
            "via",
            "message",
            "detail",
            "attempt",
            "progress_done",
            "progress_total",
            "worker",
        ]


class JobSerializer(serializers.ModelSerializer):
    """A job in a listing: what it is, where it stands, and when."""

    progress = ProgressSerializer(source="*", read_only=True)
    pipeline = serializers.UUIDField(source="pipeline_id", read_only=True)
    parent = serializers.IntegerField(source="parent_id", read_only=True, allow_null=True)
    tenant = serializers.IntegerField(source="tenant_id", read_only=True, allow_null=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    duration_seconds = serializers.FloatField(read_only=True, allow_null=True)
    # Declared: a read-only model field loses allow_blank, and the schema's enum then
    # lacks the "" that every job that has not failed answers.
    error_kind = serializers.ChoiceField(
        Job.ErrorKind.choices, allow_blank=True, read_only=True, help_text="Empty unless the job failed."
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "type",
            "queue",
            "priority",
            "state",
            "progress",
            "attempts",
            "max_attempts",
            "run_after",
            "pipeline",
            "parent",
            "tenant",
            "concurrency_key",
            "unique_key",
            "error_kind",
            "created_at",
            "started_at",
            "finished_at",
            "duration_seconds",
            "created_by",
        ]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    """Everything about one job, the "why" line and its history. The lease token is left
    out: it is the fence of the running attempt and nobody outside the worker needs it."""

    why = serializers.SerializerMethodField()
    last_error = ErrorTextField()
    history = serializers.SerializerMethodField()
    history_truncated = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields,
            "payload",
            "result",
            "locked_by",
            "locked_at",
            "heartbeat_at",
            "lease_expires_at",
            "rescues",
            "is_current",
            "last_error",
            "why",
            "history",
            "history_truncated",
        ]
        read_only_fields = fields

    def get_why(self, job: Job) -> str:
        return explain(job)

    @extend_schema_field(JobEventSerializer(many=True))
    def get_history(self, job: Job) -> list[dict[str, Any]]:
        return JobEventSerializer(self._history(job)[0], many=True, context=self.context).data

    def get_history_truncated(self, job: Job) -> bool:
        return self._history(job)[1]

    def _history(self, job: Job) -> tuple[list[JobEvent], bool]:
        """The newest HISTORY_LIMIT rows in time order, and whether older ones exist
        (one query per job, shared by both fields)."""
        cache = self.context.setdefault("_history", {})
        if job.pk not in cache:
            newest = list(job.events.select_related("actor").order_by("-id")[: HISTORY_LIMIT + 1])
            cache[job.pk] = (newest[:HISTORY_LIMIT][::-1], len(newest) > HISTORY_LIMIT)
        return cache[job.pk]


def _json_type(value: Any) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(serializers.JSONField):
    """A JSON value that must be an object (checked by the serializer that uses it, which
    names what it got); the schema says so rather than "any value"."""


class OpenJobType(serializers.ChoiceField):
    """A job type API clients may enqueue: one that declares an API payload. The schema
    lists them (the choices are read from the registry each time the field is made)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=[h.name for h in registry.all_handlers() if h.api_payload], **kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = str(data)[:100]
        if value in self.choices:
            return value
        open_types = ", ".join(self.choices) or "none"
        if registry.get(value) is None:
            raise ValidationError(f"unknown job type {value!r}; API clients may enqueue: {open_types}")
        raise ValidationError(
            f"{value!r} cannot be enqueued through the API: its own endpoint "
            f"or admin page starts it. API clients may enqueue: {open_types}"
        )


class EnqueueSerializer(ClosedSerializer):
    """What a caller may set when enqueueing; everything else is the handler's default.

    Only job types that declare an API payload serializer (``jobs.ApiPayload``) can be
    enqueued here; the payload the job receives is that serializer's output, with every
    object it names found through the job's tenant.
    """

    type = OpenJobType(help_text="A job type open to API clients; the others start from their own endpoints.")
    payload = JSONObjectField(
        required=False, default=dict, help_text="A JSON object, validated by the job type."
    )
    queue = serializers.CharField(
        min_length=1,
        max_length=50,
        required=False,
        help_text="Platform operators only; defaults to the handler's queue.",
    )
    priority = serializers.IntegerField(min_value=-32768, max_value=32767, default=0)
    run_after = serializers.DateTimeField(required=False, allow_null=True)
    unique_key = serializers.CharField(
        min_length=1,
        max_length=200,
        required=False,
        allow_null=True,
        help_text="Per tenant: enqueueing again while a job with this key is unfinished returns it.",
    )
    concurrency_key = serializers.CharField(
        min_length=1,
        max_length=200,
        required=False,
        allow_null=True,
        help_text="Per tenant: jobs sharing a key never run at the same time.",
    )
    tenant = serializers.IntegerField(
        required=False, allow_null=True, help_text="Platform operators only; others get their own."
    )

    def validate_payload(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValidationError(f"must be a JSON object, got {_json_type(value)}")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["tenant"] = self._tenant(attrs.get("tenant"))
        if attrs.get("queue") and self.context["scope"] is not True:
            raise ValidationError({"queue": ["only platform operators choose a queue"]})
        attrs["payload"] = self._payload(attrs["type"], attrs.get("payload", {}), attrs["tenant"])
        return attrs

    def _tenant(self, requested: int | None) -> int | None:
        """The caller's own tenant; a platform operator may name any existing one.
        Refused before any lookup, so a tenant user cannot probe which ids exist."""
        scope = self.context["scope"]
        if scope is not True:
            if requested not in (None, scope):
                raise ValidationError({"tenant": ["only platform operators choose a tenant"]})
            return scope
        if requested is not None and not Tenant.objects.filter(pk=requested).exists():
            raise ValidationError({"tenant": [f"no tenant with id {requested}"]})
        return requested

    def _payload(self, name: str, payload: dict[str, Any], tenant: int | None) -> dict[str, Any]:
        """The job type's own validation of the payload, for the job's tenant."""
        handler = registry.get(name)
        assert handler is not None and handler.api_payload is not None  # validate_type
        form = handler.api_payload(
            data=payload, context={"tenant": tenant, "request": self.context.get("request")}
        )
        if not form.is_valid():
            raise ValidationError({"payload": form.errors})
        return dict(form.data)


class ActionSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=1000, help_text="Recorded in the job's history."
    )


class TypeFiguresSerializer(serializers.Serializer):
    type = serializers.CharField()
    finished = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    throughput_per_min = serializers.FloatField(help_text="Finished jobs per minute.")
    failure_rate = serializers.FloatField(allow_null=True, help_text="failed / (succeeded + failed).")
    p50_seconds = serializers.FloatField(allow_null=True)
    p95_seconds = serializers.FloatField(allow_null=True)
    retries = serializers.IntegerField(help_text="Retries scheduled in the window.")
    rescues = serializers.IntegerField(help_text="Jobs taken back from dead workers.")


class QueueLagSerializer(serializers.Serializer):
    queue = serializers.CharField()
    due = serializers.IntegerField(help_text="Jobs a worker could claim now.")
    oldest_due_at = serializers.DateTimeField()
    lag_seconds = serializers.FloatField()


class DashboardSerializer(serializers.Serializer):
    window = serializers.CharField()
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    types = TypeFiguresSerializer(many=True)
    queues = QueueLagSerializer(many=True)
    expired_leases = serializers.IntegerField(
        help_text="Running jobs whose lease expired (the reaper has not caught up)."
    )


class DeliveryCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField(source="deliveries_total")
    pending = serializers.IntegerField(source="deliveries_pending")
    running = serializers.IntegerField(source="deliveries_running")
    succeeded = serializers.IntegerField(source="deliveries_succeeded")
    failed = serializers.IntegerField(source="deliveries_failed")
    cancelled = serializers.IntegerField(source="deliveries_cancelled")


class DeliverySerializer(serializers.ModelSerializer):
    job = serializers.IntegerField(source="job_id", read_only=True)
    state = serializers.CharField(source="job.state", read_only=True)
    deliver_after = serializers.DateTimeField(source="job.run_after", read_only=True)
    attempts = serializers.IntegerField(source="job.attempts", read_only=True)
    max_attempts = serializers.IntegerField(source="job.max_attempts", read_only=True)
    last_error = ErrorTextField(source="job.last_error")
    finished_at = serializers.DateTimeField(source="job.finished_at", read_only=True, allow_null=True)

    class Meta:
        model = Delivery
        fields = [
            "id",
            "subscriber",
            "job",
            "state",
            "deliver_after",
            "attempts",
            "max_attempts",
            "last_error",
            "finished_at",
        ]


class EventSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="tenant_id", read_only=True, allow_null=True)
    pipeline = serializers.UUIDField(source="pipeline_id", read_only=True, allow_null=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    deliveries = DeliveryCountsSerializer(source="*", read_only=True)

    class Meta:
        model = Event
        fields = ["id", "name", "payload", "tenant", "pipeline", "created_at", "created_by", "deliveries"]


class EventDetailSerializer(EventSerializer):
    delivery_jobs = DeliverySerializer(source="deliveries", many=True, read_only=True)

    class Meta(EventSerializer.Meta):
        fields = [*EventSerializer.Meta.fields, "delivery_jobs"]
