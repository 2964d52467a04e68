"""What can be done with scraped references, for the API, the admin and the handlers:
sync a scrape run's references, follow each new payload's handoff to ingestion, retry a
failed one, redrive failed ones by filter (``redriving``).

A sync registers its scrape run (if new), then, in one transaction:

1. the references are upserted in bulk; a reference whose payload hash did not change
   is not touched at all;
2. each reference whose payload is new or changed gets its handoff, one per
   ``(reference, payload_hash)`` (a database unique constraint): created ``queued``
   (``queued_from_scrape``), or a finished one of the same payload queued again;
3. the handoffs' ingestions are queued, one engine job each (``ingest.IngestReference``,
   which starts the reference's ingest run), unless the reference's ingestion is already
   queued or running: then the handoff waits for it (``ingestion_job_already_active``)
   and is queued when that one ends. Queueing is retried on transient errors only
   (``retrying``); exhausted, the handoffs fail with ``retry_exhausted``.
4. the sync is added to its scrape run's counts, last: that row is the one concurrent
   syncs of a run share.

Every change of a handoff is a ``HandoffTransition``, written with the change.

The parts: ``reading`` checks a sync's body, ``history`` writes handoffs with their
transitions, ``queueing`` queues ingestions, ``following`` follows them to the end. This
module runs the sync and is what the API, the admin and the handlers call.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import F

import jobs
from ingest import conf
from ingest.runs.models import IngestSource
from ingest.scraping import history, queueing, retrying
from ingest.scraping.following import (
    HandoffRefused,
    queue_next,
    queue_waiting,
    retry_handoffs,
    settle_for_run,
    settle_stuck_handoffs,
    start_ingestion,
)
from ingest.scraping.history import actor_user
from ingest.scraping.models import (
    HandoffReason,
    HandoffStatus,
    HandoffTransition,
    IngestionHandoff,
    ScrapeReference,
    ScrapeRun,
)
from ingest.scraping.queueing import INGEST_REFERENCE, active_references, queue
from ingest.scraping.reading import Incoming, SyncRefused, check_scrape_run_id, read_references
from ingest.scraping.redriving import (
    BATCH,
    MAX_AGE_SECONDS,
    REQUEST_BATCHES,
    SAMPLE,
    RedriveFilter,
    Redriven,
    RedrivePreview,
    RedriveRefused,
    database_now,
    preview_redrive,
    redrive,
)

__all__ = [
    "BATCH",
    "MAX_AGE_SECONDS",
    "REQUEST_BATCHES",
    "INGEST_REFERENCE",
    "HandoffCounts",
    "HandoffRefused",
    "RedriveFilter",
    "RedrivePreview",
    "RedriveRefused",
    "Redriven",
    "SAMPLE",
    "SyncRefused",
    "SyncResult",
    "active_references",
    "check_scrape_run_id",
    "database_now",
    "handoffs_available",
    "json_counts",
    "preview_redrive",
    "queue",
    "queue_next",
    "queue_waiting",
    "read_references",
    "redrive",
    "retry_handoffs",
    "settle_for_run",
    "settle_stuck_handoffs",
    "start_ingestion",
    "sync",
]


@dataclass
class HandoffCounts:
    """What this sync did about handoffs; the four counts add up to the references sent.

    ``queued``: an ingestion was queued now. ``completed``: the payload was ingested
    before. ``failed``: queueing failed now, or the payload's handoff had failed (an
    operator retries it). ``skipped``: nothing to do now, ``reasons`` says why
    (``payload_unchanged``: its handoff is queued or running;
    ``ingestion_job_already_active``: it waits for the reference's running ingestion).
    """

    queued: int = 0
    completed: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: Counter = field(default_factory=Counter)

    def skip(self, reason: str, count: int) -> None:
        if count:
            self.skipped += count
            self.reasons[reason] += count


@dataclass
class SyncResult:
    scrape_run: ScrapeRun
    received: int
    created: int
    changed: int
    unchanged: int
    handoffs: HandoffCounts | None  # None: the handoff tables are not there


def handoffs_available() -> bool:
    """Whether the handoff tables exist (they are dropped when their migration is
    reversed; a sync then stores references only)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [IngestionHandoff._meta.db_table])
        return cursor.fetchone()[0]


def sync(
    source: IngestSource,
    scrape_run_id: Any,
    items: Any,
    *,
    actor: Any = None,
    policy: retrying.RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> SyncResult:
    """Store a scrape run's references for ``source`` and hand each new payload off to
    ingestion, all in one transaction (see the module's docstring).

    Concurrent syncs of one scrape run (a scraper sending its references in parallel
    chunks) do not wait for each other: the run's row is registered apart, and locked
    only by the last statement, which adds this sync to its counts once every other
    write is done and checked."""
    run_id = check_scrape_run_id(scrape_run_id)
    incoming = read_references(items)
    policy = policy or default_policy()
    scrape_run = _register_scrape_run(source, run_id, jobs.now())
    with transaction.atomic():
        now = jobs.now()
        upserted = _upsert_references(source, scrape_run, incoming, now)
        changed = upserted.changed
        created = sum(1 for row in changed if row[2])
        counts = None
        if handoffs_available():
            counts = _hand_off(
                source, scrape_run, len(incoming), upserted, actor=actor, now=now, policy=policy, sleep=sleep
            )
        scrape_run = _count_sync(
            scrape_run, received=len(incoming), changed=len(changed), actor=actor, now=now
        )
    return SyncResult(
        scrape_run,
        received=len(incoming),
        created=created,
        changed=len(changed) - created,
        unchanged=len(incoming) - len(changed),
        handoffs=counts,
    )


def default_policy() -> retrying.RetryPolicy:
    return retrying.RetryPolicy(
        max_attempts=int(conf.get("HANDOFF_MAX_ATTEMPTS")),
        base_seconds=float(conf.get("HANDOFF_BACKOFF_BASE_SECONDS")),
    )


def _register_scrape_run(source: IngestSource, run_id: str, now: Any) -> ScrapeRun:
    """The scrape run, registered by its first sync (with no syncs counted yet), in a
    transaction of its own unless the caller has one open: concurrent first syncs of a
    run would otherwise wait on its unique key until the first of them commits. A run
    whose first sync then fails stays registered, with nothing synced."""
    with transaction.atomic():
        ScrapeRun.objects.bulk_create(
            [
                ScrapeRun(
                    tenant_id=source.tenant_id,
                    source=source,
                    run_id=run_id,
                    syncs=0,
                    first_sync_at=now,
                    last_sync_at=now,
                )
            ],
            ignore_conflicts=True,
        )
        return ScrapeRun.objects.get(source=source, run_id=run_id)


def _count_sync(scrape_run: ScrapeRun, *, received: int, changed: int, actor: Any, now: Any) -> ScrapeRun:
    """Add this sync to its scrape run's counts: the last write of a sync, because it
    locks the row that concurrent syncs of the run share until the commit. The
    foreign-key checks deferred to the commit are run first, so that the commit that
    releases the lock is a short one."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")  # as Django declares them
    ScrapeRun.objects.filter(pk=scrape_run.pk).update(
        syncs=F("syncs") + 1,
        references_received=F("references_received") + received,
        references_changed=F("references_changed") + changed,
        last_sync_at=now,
        last_synced_by=actor_user(actor),
    )
    return ScrapeRun.objects.get(pk=scrape_run.pk)


@dataclass(frozen=True)
class Upserted:
    changed: list[tuple[int, str, bool]]  # (id, payload hash, created) of each written
    unchanged: list[int]  # the ids of the references whose payload hash was the same


_STORED_HASHES = f"""
    SELECT external_id, id, payload_hash FROM {ScrapeReference._meta.db_table}
    WHERE source_id = %(source)s AND external_id = ANY(%(external_ids)s::text[])"""

# One JSON document of [external id, payload, hash] rows: PostgreSQL parses it three times
# faster than a jsonb[] parameter of the same payloads.
_UPSERT_REFERENCES = f"""
    INSERT INTO {ScrapeReference._meta.db_table} AS r (
        tenant_id, source_id, external_id, payload, payload_hash, first_seen_at, changed_at,
        changed_in_id)
    SELECT %(tenant)s, %(source)s, i->>0, i->1, i->>2, %(now)s, %(now)s, %(scrape_run)s
    FROM jsonb_array_elements(%(rows)s::jsonb) AS i
    ON CONFLICT (source_id, external_id) DO UPDATE SET
        payload = EXCLUDED.payload, payload_hash = EXCLUDED.payload_hash,
        changed_at = EXCLUDED.changed_at, changed_in_id = EXCLUDED.changed_in_id
    WHERE r.payload_hash <> EXCLUDED.payload_hash
    RETURNING r.id, r.payload_hash, xmax = 0"""


def _upsert_references(source: IngestSource, scrape_run: ScrapeRun, incoming: Incoming, now: Any) -> Upserted:
    """Insert new references and update those whose payload changed. The stored hashes
    are read first, so that an unchanged reference costs its id's lookup only: no payload
    sent, no write, no row lock. Both statements bind their parameters server-side
    (``jobs.execute_prepared``): tens of thousands of ids and megabytes of payloads go as
    they are, not quoted in Python."""
    if not incoming:
        return Upserted([], [])
    stored = {
        external_id: (pk, hash_)
        for external_id, pk, hash_ in jobs.execute_prepared(
            _STORED_HASHES, {"source": source.pk, "external_ids": incoming.external_ids}
        )
    }
    unchanged, write = [], []
    for index, external_id in enumerate(incoming.external_ids):
        known = stored.get(external_id)
        if known is not None and known[1] == incoming.hashes[index]:
            unchanged.append(known[0])
        else:
            write.append(index)
    if not write:
        return Upserted([], unchanged)
    rows = ",".join(
        f'[{json.dumps(incoming.external_ids[i])},{incoming.payloads[i]},"{incoming.hashes[i]}"]'
        for i in write
    )
    written = jobs.execute_prepared(
        _UPSERT_REFERENCES,
        {
            "rows": f"[{rows}]",
            "source": source.pk,
            "tenant": source.tenant_id,
            "now": now,
            "scrape_run": scrape_run.pk,
        },
    ).fetchall()
    return Upserted([(pk, hash_, created) for pk, hash_, created in written], unchanged)


def _hand_off(
    source: IngestSource,
    scrape_run: ScrapeRun,
    received: int,
    upserted: Upserted,
    *,
    actor: Any,
    now: Any,
    policy: retrying.RetryPolicy,
    sleep: Callable[[float], None],
) -> HandoffCounts:
    counts = HandoffCounts()
    new = [(pk, hash_) for pk, hash_, created in upserted.changed if created]
    changed = [(pk, hash_) for pk, hash_, created in upserted.changed if not created]
    opened = _open_handoffs(source, scrape_run, changed, actor=actor, now=now)
    # A changed reference whose payload's handoff is still queued or running (its payload
    # went back to one still on its way) has nothing new to hand off.
    counts.skip(HandoffReason.PAYLOAD_UNCHANGED, len(changed) - len(opened))
    _count_unchanged(upserted.unchanged, received - len(upserted.changed), counts)
    if new:
        _hand_off_new(source, scrape_run, new, counts, actor=actor, now=now, policy=policy, sleep=sleep)
    if opened:
        _queue_with_retries(source, opened, counts, actor=actor, policy=policy, sleep=sleep)
    return counts


def _hand_off_new(
    source: IngestSource,
    scrape_run: ScrapeRun,
    new: list[tuple[int, str]],
    counts: HandoffCounts,
    *,
    actor: Any,
    now: Any,
    policy: retrying.RetryPolicy,
    sleep: Callable[[float], None],
) -> None:
    """References this sync created have no handoff and no ingestion anywhere yet: each
    handoff is written already queued, with its ingestion job and both transitions (no
    second write of the row, the bulk of a first sync)."""
    table = IngestionHandoff._meta.db_table
    created = [
        ("", HandoffStatus.QUEUED, HandoffReason.QUEUED_FROM_SCRAPE, f"scrape run {scrape_run.run_id}")
    ]

    def once(attempt: int) -> None:
        with transaction.atomic(), queueing.lock_timeout(int(conf.get("HANDOFF_LOCK_TIMEOUT_MS"))):
            ids = history.allocate_ids(table, len(new))
            job_ids = jobs.enqueue_many(
                INGEST_REFERENCE,
                [{"handoff": pk} for pk in ids],
                tenant=source.tenant_id,
                created_by=actor_user(actor),
            )
            history.insert(
                source,
                scrape_run,
                ids,
                new,
                job_ids=job_ids,
                attempts=attempt,
                status=HandoffStatus.QUEUED,
                reason=HandoffReason.INGESTION_JOB_QUEUED,
                steps=[
                    *created,
                    (
                        HandoffStatus.QUEUED,
                        HandoffStatus.QUEUED,
                        HandoffReason.INGESTION_JOB_QUEUED,
                        "ingestion job queued",
                    ),
                ],
                actor=actor,
                now=now,
            )

    result = queueing.attempt(source, once, policy, sleep)
    if result.refused is None:
        counts.queued += len(new)
        return
    reason, error = result.refused
    history.insert(
        source,
        scrape_run,
        history.allocate_ids(table, len(new)),
        new,
        job_ids=None,
        attempts=result.attempts,
        status=HandoffStatus.FAILED,
        reason=reason,
        last_error=error,
        actor=actor,
        now=now,
        steps=[*created, (HandoffStatus.QUEUED, HandoffStatus.FAILED, reason, error)],
    )
    counts.failed += len(new)


def _open_handoffs(
    source: IngestSource, scrape_run: ScrapeRun, changed: list[tuple[int, str]], *, actor: Any, now: Any
) -> list[tuple[int, int]]:
    """A queued handoff per payload of a reference that existed and changed: created, or a
    finished one of the same payload queued again. ``(handoff id, reference id)`` of each, with its
    transition written."""
    if not changed:
        return []
    table = IngestionHandoff._meta.db_table
    user = getattr(actor_user(actor), "pk", None)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH incoming AS (
                SELECT * FROM unnest(%(refs)s::bigint[], %(hashes)s::text[])
                    AS i(reference_id, payload_hash)
            ), previous AS (
                SELECT h.id, h.status FROM {table} h JOIN incoming USING (reference_id, payload_hash)
            ), opened AS (
                INSERT INTO {table} AS h (
                    tenant_id, source_id, reference_id, payload_hash, scrape_run_id, status,
                    reason_code, attempts, last_error, job_id, ingest_run_id, created_by_id,
                    created_at, updated_at)
                SELECT %(tenant)s, %(source)s, i.reference_id, i.payload_hash, %(scrape_run)s,
                       %(queued)s, %(reason)s, 0, '', NULL, NULL, %(user)s, %(now)s, %(now)s
                FROM incoming i
                ON CONFLICT (reference_id, payload_hash) DO UPDATE SET
                    status = EXCLUDED.status, reason_code = EXCLUDED.reason_code,
                    scrape_run_id = EXCLUDED.scrape_run_id, attempts = 0, last_error = '',
                    job_id = NULL, ingest_run_id = NULL, created_by_id = EXCLUDED.created_by_id
                WHERE h.status IN (%(completed)s, %(failed)s)
                RETURNING h.id, h.reference_id
            ), noted AS (
                INSERT INTO {HandoffTransition._meta.db_table} (
                    handoff_id, at, from_status, to_status, kind, message, actor_id)
                SELECT o.id, %(now)s, COALESCE(p.status, ''), %(queued)s, %(reason)s,
                       %(message)s, %(user)s
                FROM opened o LEFT JOIN previous p ON p.id = o.id
            )
            SELECT id, reference_id FROM opened""",
            {
                "refs": [row[0] for row in changed],
                "hashes": [row[1] for row in changed],
                "tenant": source.tenant_id,
                "source": source.pk,
                "scrape_run": scrape_run.pk,
                "queued": HandoffStatus.QUEUED,
                "completed": HandoffStatus.COMPLETED,
                "failed": HandoffStatus.FAILED,
                "reason": HandoffReason.QUEUED_FROM_SCRAPE,
                "user": user,
                "now": now,
                "message": f"scrape run {scrape_run.run_id}",
            },
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _count_unchanged(references: list[int], unchanged: int, counts: HandoffCounts) -> None:
    """Count the ``unchanged`` references whose payload did not change, by where their
    payload's handoff stands."""
    if not unchanged:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT h.status, count(*) FROM {ScrapeReference._meta.db_table} r
            JOIN {IngestionHandoff._meta.db_table} h
              ON h.reference_id = r.id AND h.payload_hash = r.payload_hash
            WHERE r.id = ANY(%s::bigint[])
            GROUP BY h.status""",
            [references],
        )
        by_status = dict(cursor.fetchall())
    completed = by_status.get(HandoffStatus.COMPLETED, 0)
    failed = by_status.get(HandoffStatus.FAILED, 0)
    counts.completed += completed
    counts.failed += failed
    # Queued or running, or (stored before the handoff tables existed) none at all.
    counts.skip(HandoffReason.PAYLOAD_UNCHANGED, unchanged - completed - failed)


def _queue_with_retries(
    source: IngestSource,
    opened: list[tuple[int, int]],
    counts: HandoffCounts,
    *,
    actor: Any,
    policy: retrying.RetryPolicy,
    sleep: Callable[[float], None],
) -> None:
    def once(_attempt: int) -> tuple[int, int]:
        with transaction.atomic():  # a savepoint: a failed try leaves nothing behind
            # The sync's upsert holds every reference of ``opened`` already.
            return queueing.queue(source, opened, actor=actor, locked=True)

    result = queueing.attempt(source, once, policy, sleep)
    if result.refused is None:
        queued, waiting = result.value
        counts.queued += queued
        counts.skip(HandoffReason.INGESTION_JOB_ALREADY_ACTIVE, waiting)
        if result.attempts > 1:
            IngestionHandoff.objects.filter(pk__in=[h for h, _ in opened]).update(attempts=result.attempts)
        return
    reason, error = result.refused
    _fail(opened, reason, error, attempts=result.attempts, actor=actor)
    counts.failed += len(opened)


def _fail(opened: Sequence[tuple[int, int]], reason: str, error: str, *, attempts: int, actor: Any) -> None:
    history.move(
        [h for h, _ in opened],
        HandoffStatus.FAILED,
        reason,
        message=error,
        actor=actor,
        attempts=attempts,
        last_error=error[:4000],
    )


def json_counts(counts: HandoffCounts) -> dict[str, Any]:
    return {
        "handoff_queued_count": counts.queued,
        "handoff_completed_count": counts.completed,
        "handoff_failed_count": counts.failed,
        "handoff_skipped_count": counts.skipped,
        "handoff_skipped_reasons": {str(k): v for k, v in sorted(counts.reasons.items()) if v},
    }
