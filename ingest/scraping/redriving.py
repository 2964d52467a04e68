"""Redriving failed handoffs by filter: the operator's way back for payloads whose
ingestion could not be queued (``retry_exhausted``, ``queue_refused``) or failed, for the
API, the admin and ``manage.py handoff_redrive`` alike.

A later sync of the same payload does not queue a failed handoff again (a scraper sends
its unchanged references on every run, and a broken ingester would be hammered once a
run); only a changed payload gets a new handoff. A redrive is how an operator sends them
back, and it is bounded: ``BATCH`` handoffs a transaction, each batch committed with its
audit (a ``HandoffsRedriven`` event: who, through which door, the filter and the count;
and on each handoff a transition naming the redrive). It takes only handoffs that failed
before its ``failed_before`` (fixed when it starts and answered): a redriven handoff's
``updated_at`` moves past it, so running it again with the same ``failed_before`` goes on
where it stopped and never queues a handoff twice, even one that failed again meanwhile.
Only a reference's latest payload is redriven; a failed handoff of an older one stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F, QuerySet

import jobs
from ingest import conf
from ingest.runs.models import IngestSource
from ingest.scraping import history, queueing
from ingest.scraping.history import actor_user, database_now
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff, ScrapeReference

BATCH = 500  # handoffs a transaction
SAMPLE = 20  # handoffs a preview shows
# Batches one request (an API call, an admin confirmation) runs; past them it says how many
# remain, for the next request with the same ``failed_before``.
REQUEST_BATCHES = 20
# The oldest age a filter may name (ten years): older is no handoff, and no date either.
MAX_AGE_SECONDS = 10 * 366 * 24 * 3600
HANDOFFS_REDRIVEN = "HandoffsRedriven"
# What may be redriven: a handoff still on its way is the engine's to follow.
REDRIVABLE = (HandoffStatus.FAILED,)


class RedriveRefused(Exception):
    """A filter a redrive cannot take; ``field`` names what is wrong."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass(frozen=True)
class RedriveFilter:
    """Which handoffs of ``source`` a redrive takes: failed ones, of its scrape run
    ``scrape_run_id`` and for one of ``reasons`` if given, last changed before
    ``failed_before`` and ``older_than`` ago (when the redrive starts if neither is
    given), among ``handoffs`` (an admin's selection) if given."""

    source: IngestSource
    scrape_run_id: str | None = None
    reasons: tuple[str, ...] = ()
    failed_before: datetime | None = None
    handoffs: QuerySet[IngestionHandoff] | None = None
    older_than: timedelta | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.reasons) - set(HandoffReason.values))
        if unknown:
            raise RedriveRefused("reason", f"unknown reason {', '.join(unknown)}")

    def fixed(self) -> RedriveFilter:
        """This filter with its ``failed_before`` set: the redrive's bound, kept by its
        batches and by a later run that resumes it. In the database's time, which keeps
        the handoffs' ``updated_at``."""
        if self.older_than is None:
            return self if self.failed_before is not None else replace(self, failed_before=database_now())
        bound = database_now() - self.older_than
        if self.failed_before is not None:
            bound = min(bound, self.failed_before)  # both hold
        return replace(self, failed_before=bound, older_than=None)

    def described(self) -> dict[str, Any]:
        """The filter as data, for the audit."""
        return {
            "source": self.source.name,
            "tenant": self.source.tenant_id,
            "status": HandoffStatus.FAILED.value,
            "scrape_run_id": self.scrape_run_id,
            "reasons": list(self.reasons),
            "failed_before": self.failed_before.isoformat() if self.failed_before else None,
            "selection": self.handoffs is not None,
        }

    def matching(self) -> QuerySet[IngestionHandoff]:
        """The handoffs it takes now; of a ``fixed`` filter."""
        found = IngestionHandoff.objects.filter(
            source=self.source,
            status__in=REDRIVABLE,
            payload_hash=F("reference__payload_hash"),
            updated_at__lt=self.failed_before,
        )
        if self.scrape_run_id is not None:
            found = found.filter(scrape_run__run_id=self.scrape_run_id)
        if self.reasons:
            found = found.filter(reason_code__in=self.reasons)
        if self.handoffs is not None:
            found = found.filter(pk__in=self.handoffs.values("pk"))
        return found


@dataclass(frozen=True)
class RedrivePreview:
    """What a redrive would take now: how many, the oldest ``SAMPLE`` of them, and its
    bound."""

    count: int
    sample: list[IngestionHandoff]
    failed_before: datetime


def preview_redrive(redrive_filter: RedriveFilter, *, sample: int = SAMPLE) -> RedrivePreview:
    fixed = redrive_filter.fixed()
    matching = fixed.matching()
    shown = list(matching.select_related("reference", "scrape_run").order_by("id")[:sample])
    assert fixed.failed_before is not None
    return RedrivePreview(matching.count(), shown, fixed.failed_before)


@dataclass
class Redriven:
    """What a redrive did: handoffs queued again (``queued`` of them with a job now,
    ``waiting`` for their reference's ingestion in progress), in ``batches``
    transactions; ``remaining`` still match (it stopped at ``max_batches``)."""

    failed_before: datetime
    count: int = 0
    queued: int = 0
    waiting: int = 0
    batches: int = 0
    remaining: int = 0
    events: list[int] = field(default_factory=list)


def redrive(
    redrive_filter: RedriveFilter,
    *,
    actor: Any,
    via: str,
    note: str = "",
    batch: int = BATCH,
    max_batches: int | None = None,
) -> Redriven:
    """Queue the matching handoffs again, ``batch`` a transaction, oldest first, each
    batch with its audit (see the module's docstring); up to ``max_batches``
    transactions, then ``remaining`` says how many are left for a next run with the
    answered ``failed_before``."""
    fixed = redrive_filter.fixed()
    assert fixed.failed_before is not None
    done = Redriven(fixed.failed_before)
    after = 0
    while max_batches is None or done.batches < max_batches:
        with transaction.atomic():
            rows = list(
                fixed.matching().filter(pk__gt=after).order_by("id").values_list("pk", "reference_id")[:batch]
            )
            if not rows:
                break
            after = rows[-1][0]
            taken = _take(fixed, rows, actor=actor, via=via, note=note)
            if taken:
                queued, waiting = queueing.queue(fixed.source, taken, actor=actor, via=via, locked=True)
                event = jobs.publish(
                    HANDOFFS_REDRIVEN,
                    {
                        "via": via,
                        "note": note,
                        "filter": fixed.described(),
                        "count": len(taken),
                        "handoffs": [pk for pk, _ in taken],
                    },
                    tenant=fixed.source.tenant_id,
                    created_by=actor_user(actor),
                )
                done.events.append(event.pk)
                done.count += len(taken)
                done.queued += queued
                done.waiting += waiting
        done.batches += 1
    if max_batches is not None and done.batches >= max_batches:
        done.remaining = fixed.matching().count()
    return done


def _take(
    fixed: RedriveFilter, rows: list[tuple[int, int]], *, actor: Any, via: str, note: str
) -> list[tuple[int, int]]:
    """The handoffs of ``rows`` that still match once their references are held (in id
    order, as ``queueing.queue`` takes them), moved to queued by the operator."""
    references = sorted({reference for _, reference in rows})
    with queueing.lock_timeout(int(conf.get("HANDOFF_LOCK_TIMEOUT_MS"))), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {ScrapeReference._meta.db_table} WHERE id = ANY(%s) ORDER BY id FOR UPDATE",
            [references],
        )
    taken = list(
        fixed.matching()
        .filter(pk__in=[pk for pk, _ in rows])
        .order_by("id")
        .select_for_update(of=("self",))
        .values_list("pk", "reference_id")
    )
    history.move(
        [pk for pk, _ in taken],
        HandoffStatus.QUEUED,
        HandoffReason.RETRIED_BY_OPERATOR,
        message=note or "redriven",
        actor=actor,
        via=via,
        detail={"redrive": fixed.described()},
        attempts=0,
        last_error="",
        job_id=None,
        ingest_run=None,
    )
    return taken
