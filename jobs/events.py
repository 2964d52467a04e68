"""Domain events through a transactional outbox: publishing writes the event and one
delivery job per subscriber in the caller's transaction, so a rolled-back caller
publishes nothing and a committed one never loses a delivery."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, connection

from jobs import arguments, clock, engine, registry, sql
from jobs.models import Event
from jobs.notify import CHANNEL

NAME_LENGTH = arguments.max_length(Event, "name")


def publish(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    tenant: Any = None,
    pipeline: Any = None,
    created_by: Any = None,
) -> Event:
    """Record event ``name`` and enqueue a delivery job for each subscribed handler.

    A delivery job's payload is ``{"event_id", "event", "payload"}``; its run_after is
    the delivery's deliver_after, moved by the subscriber's backoff on transient errors.
    Arguments are checked as by ``jobs.enqueue`` (``InvalidArgument`` names the one
    refused), before anything is written; the payload may be one level less deep, as its
    delivery wraps it.
    """
    payload = {} if payload is None else payload
    arguments.text("name", name, NAME_LENGTH, none_means="nothing: an event has a name")
    encoded = arguments.payload(payload, max_depth=arguments.MAX_PAYLOAD_DEPTH - 1)
    references = {
        "tenant": arguments.reference("tenant", tenant, Event._meta.get_field("tenant").related_model),
        "created_by": arguments.reference(
            "created_by",
            created_by,
            Event._meta.get_field("created_by").related_model,
            anonymous_is_none=True,
        ),
    }
    pipeline_id = arguments.pipeline(pipeline)
    subscribers = registry.subscribers(name)
    now = clock.now()
    params = {
        "event": name,
        "payload": encoded,
        "pipeline": pipeline_id,
        "now": now,
        "channel": CHANNEL,
        **references,
        "types": [s.name for s in subscribers],
        "queues": [s.queue for s in subscribers],
        "max_attempts": [s.max_attempts for s in subscribers],
        "key_scopes": [
            0 if s.global_keys or references["tenant"] is None else references["tenant"] for s in subscribers
        ],
    }
    checked = tuple(argument for argument, pk in references.items() if pk is not None)
    # One statement, so no savepoint: inside a caller's transaction the event and its
    # deliveries commit or roll back with the caller's work.
    row = sql.execute(sql.publish_event(checked=checked), params).fetchone()
    if row is None:
        engine.check_references(**references)
        raise IntegrityError(f"event {name!r} was not written, yet everything it names exists")
    event = Event(
        id=row[0],
        name=name,
        payload=payload,
        pipeline_id=pipeline_id,
        created_at=now,
        tenant_id=references["tenant"],
        created_by_id=references["created_by"],
    )
    event._state.adding, event._state.db = False, connection.alias
    return event
