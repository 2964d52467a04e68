"""Domain events through a transactional outbox: publishing writes the event and one
delivery job per subscriber in the caller's transaction, so a rolled-back caller
publishes nothing and a committed one never loses a delivery."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from jobs import clock, engine, registry
from jobs.models import Delivery, Event


@transaction.atomic
def publish(name: str, payload: dict[str, Any] | None = None, *, tenant: Any = None,
            pipeline: Any = None, created_by: Any = None) -> Event:
    """Record event ``name`` and enqueue a delivery job for each subscribed handler.

    A delivery job's payload is ``{"event_id", "event", "payload"}``; its run_after is
    the delivery's deliver_after, moved by the subscriber's backoff on transient errors.
    """
    payload = payload or {}
    engine._check_payload(payload)
    event = Event.objects.create(
        name=name, payload=payload, tenant_id=getattr(tenant, "pk", tenant),
        pipeline_id=pipeline, created_at=clock.now(), created_by=created_by
        if getattr(created_by, "is_authenticated", False) else None,
    )
    for subscriber in registry.subscribers(name):
        job = engine.enqueue(
            subscriber.name, {"event_id": event.pk, "event": name, "payload": payload},
            tenant=tenant, pipeline=pipeline, created_by=event.created_by,
        )
        Delivery.objects.create(event=event, subscriber=subscriber.name, job=job)
    return event
