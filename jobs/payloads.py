"""What an API client may put in the payload of a job it enqueues.

A payload reaches a handler as its instructions, so one written by a client is
untrusted input like any request body. A job type opens itself to ``POST /api/jobs/``
by naming an ``ApiPayload`` subclass (``@jobs.handler(..., api_payload=...)``): the
serializer validates the payload, and every object it names is looked up through the
job's tenant (``TenantObject``), so another tenant's id reads exactly like an id that
does not exist. The job is given the serializer's output, never the request's body.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers


class ApiPayload(serializers.Serializer):
    """Base of a job type's API payload. Unknown keys are refused, not dropped: a typo
    must not enqueue a job that silently does something else.

    The serializer's context holds ``tenant``: the id of the tenant the job will belong
    to, or None for a platform job (only platform operators enqueue those).
    """

    @property
    def tenant_id(self) -> int | None:
        return self.context.get("tenant")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        initial = self.initial_data if isinstance(self.initial_data, dict) else {}
        unknown = sorted(set(initial) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return attrs


class TenantObject(serializers.PrimaryKeyRelatedField):
    """The id of an object of the job's tenant. ``tenant_path`` is the lookup from the
    model to its tenant (``"report__unit__tenant"``). A platform job may name any."""

    default_error_messages = {
        "does_not_exist": "no object with id {pk_value} visible to this tenant",
    }

    def __init__(self, *, tenant_path: str = "tenant", **kwargs: Any) -> None:
        self.tenant_path = tenant_path
        super().__init__(**kwargs)

    def get_queryset(self) -> QuerySet:
        queryset = super().get_queryset()
        assert queryset is not None  # a writable related field is given one
        tenant = self.context.get("tenant")
        if tenant is None:
            return queryset
        return queryset.filter(**{f"{self.tenant_path}_id": tenant})
