"""Pruning finished jobs after a per-state age (failures are kept longer), and the
channel layer's expired rows."""

from __future__ import annotations

from datetime import timedelta

from channels_postgres.models import GroupChannel, Message
from django.db import transaction
from django.utils import timezone

from jobs import clock, conf
from jobs.models import Event, Job


def prune(*, older_than: dict[str, timedelta] | None = None, batch: int = 5_000) -> dict[str, int]:
    """Delete finished jobs past their state's retention; returns deletions per state.

    Deletes in batches so that a large backlog never holds one long transaction.
    Events whose deliveries are all gone are deleted with them, and so are the channel
    layer's expired rows (``prune_channel_layer``).
    """
    ages = older_than or conf.retention()
    now = clock.now()
    deleted: dict[str, int] = {}
    for state, age in ages.items():
        if state not in Job.FINISHED:
            raise ValueError(f"only finished states can be pruned, not {state!r}")
        total = 0
        while True:
            with transaction.atomic():
                ids = list(Job.objects.filter(state=state, finished_at__lt=now - age)
                           .values_list("pk", flat=True)[:batch])
                if not ids:
                    break
                Job.objects.filter(pk__in=ids).delete()
                total += len(ids)
        deleted[state] = total
    Event.objects.filter(deliveries__isnull=True, created_at__lt=now - min(ages.values())).delete()
    prune_channel_layer()
    return deleted


def prune_channel_layer() -> dict[str, int]:
    """Delete channels-postgres's expired messages and group members; returns the counts.

    The package never deletes a message delivered by NOTIFY and only sweeps expired rows
    after a group_discard, so without this its tables grow for good (a crashed
    consumer's group rows expire after the layer's ``group_expiry``). Empty with Redis.
    """
    now = timezone.now()  # the package stamps rows with wall-clock time, not jobs.clock
    return {"messages": Message.objects.filter(expire__lt=now).delete()[0],
            "group_members": GroupChannel.objects.filter(expire__lt=now).delete()[0]}


def prunable(*, older_than: dict[str, timedelta] | None = None) -> dict[str, int]:
    """What ``prune`` would delete now, per state (a dry run)."""
    ages = older_than or conf.retention()
    now = clock.now()
    return {state: Job.objects.filter(state=state, finished_at__lt=now - age).count()
            for state, age in ages.items()}
