"""Pruning finished jobs after a per-state age (failures are kept longer; a quarantined
delivery's job until its release), the events nobody is left to deliver, and the channel
layer's expired rows.

A dry run is the prune itself, run in a transaction that is rolled back: what it reports
is what a prune would delete now, cascades included, and the two cannot drift apart.
It costs what the prune costs, and holds the rows it would delete until it ends.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from channels_postgres.models import GroupChannel, Message
from django.db import transaction
from django.utils import timezone

from jobs import clock, conf
from jobs.models import Delivery, Event, Job, JobEvent

# Always reported, deleted or not; models of other apps whose rows go with their job
# (a cascade) are reported when there are any.
REPORTED = [Job, JobEvent, Delivery, Event, Message, GroupChannel]


@dataclass
class Pruned:
    """What a prune deleted, or (a dry run) would delete."""

    # Finished jobs per state.
    jobs: dict[str, int]
    # Rows per model label ("jobs.JobEvent"), the jobs' cascades included.
    rows: Counter[str] = field(
        default_factory=lambda: Counter(dict.fromkeys((model._meta.label for model in REPORTED), 0))
    )

    def as_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "rows": dict(self.rows)}


def prune(
    *, older_than: dict[str, timedelta] | None = None, batch: int = 5_000, dry_run: bool = False
) -> Pruned:
    """Delete finished jobs past their state's retention, with everything that goes with
    them; ``dry_run`` does the same and rolls it back.

    Deletes in batches so that a large backlog never holds one long transaction (a dry
    run is one transaction). Events whose deliveries are all gone are deleted after the
    jobs, and so are the channel layer's expired rows (``prune_channel_layer``).
    """
    ages = older_than or conf.retention()
    for state in ages:
        if state not in Job.FINISHED:
            raise ValueError(f"only finished states can be pruned, not {state!r}")
    if not dry_run:
        return _prune(ages, clock.now(), batch)
    with transaction.atomic():
        pruned = _prune(ages, clock.now(), batch)
        transaction.set_rollback(True)
    return pruned


def _prune(ages: dict[str, timedelta], now: datetime, batch: int) -> Pruned:
    pruned = Pruned(jobs=dict.fromkeys(ages, 0))
    # A quarantined delivery waits for an operator's release, however old its job.
    held = Delivery.objects.filter(quarantined_at__isnull=False).values("job_id")
    for state, age in ages.items():
        while True:
            with transaction.atomic():
                ids = list(
                    Job.objects.filter(state=state, finished_at__lt=now - age)
                    .exclude(pk__in=held)
                    .values_list("pk", flat=True)[:batch]
                )
                if not ids:
                    break
                _, rows = Job.objects.filter(pk__in=ids).delete()
            pruned.jobs[state] += len(ids)
            pruned.rows.update(rows)
    _, rows = Event.objects.filter(deliveries__isnull=True, created_at__lt=now - min(ages.values())).delete()
    pruned.rows.update(rows)
    pruned.rows.update(prune_channel_layer())
    return pruned


def prune_channel_layer() -> Counter[str]:
    """Delete channels-postgres's expired messages and group members; rows per model label.

    The package never deletes a message delivered by NOTIFY and only sweeps expired rows
    after a group_discard, so without this its tables grow for good (a crashed
    consumer's group rows expire after the layer's ``group_expiry``). Empty with Redis.
    """
    now = timezone.now()  # the package stamps rows with wall-clock time, not jobs.clock
    deleted: Counter[str] = Counter()
    for model in (Message, GroupChannel):
        deleted.update(model.objects.filter(expire__lt=now).delete()[1])
    return deleted
