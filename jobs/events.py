"""Domain events through a transactional outbox: publishing writes the event and one
delivery job per subscriber in the caller's transaction, so a rolled-back caller
publishes nothing and a committed one never loses a delivery."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from jobs import arguments, clock, engine, registry
from jobs.models import Delivery, Event

NAME_LENGTH = Event._meta.get_field("name").max_length


def publish(name: str, payload: dict[str, Any] | None = None, *, tenant: Any = None,
            pipeline: Any = None, created_by: Any = None) -> Event:
    """Record event ``name`` and enqueue a delivery job for each subscribed handler.

    A delivery job's payload is ``{"event_id", "event", "payload"}``; its run_after is
    the delivery's deliver_after, moved by the subscriber's backoff on transient errors.
    Arguments are checked as by ``jobs.enqueue`` (``InvalidArgument`` names the one
    refused), before anything is written; the payload may be one level less deep, as its
    delivery wraps it.
    """
    payload = {} if payload is None else payload
    arguments.text("name", name, NAME_LENGTH, none_means="nothing: an event has a name")
    arguments.payload(payload, max_depth=arguments.MAX_PAYLOAD_DEPTH - 1)
    tenant_id = arguments.reference("tenant", tenant, Event._meta.get_field("tenant").related_model)
    pipeline_id = arguments.pipeline(pipeline)
    engine.check_references(tenant=tenant_id)
    # No savepoint: the arguments are checked, and inside a caller's transaction the event
    # and its deliveries commit or roll back with the caller's work. A pipeline that
    # publishes per batch saves two round trips an event.
    with transaction.atomic(savepoint=False):
        event = Event.objects.create(
            name=name, payload=payload, tenant_id=tenant_id, pipeline_id=pipeline_id,
            created_at=clock.now(), created_by=created_by
            if getattr(created_by, "is_authenticated", False) else None,
        )
        for subscriber in registry.subscribers(name):
            job = engine.enqueue(
                subscriber.name, {"event_id": event.pk, "event": name, "payload": payload},
                tenant=tenant_id, pipeline=pipeline_id, created_by=event.created_by,
            )
            Delivery.objects.create(event=event, subscriber=subscriber.name, job=job)
    return event
