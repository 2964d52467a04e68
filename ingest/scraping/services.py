"""What can be done with scraped references, for the API, the admin and the handlers:
sync a scrape run's references, follow each new payload's handoff to ingestion, retry a
failed one.

A sync, in one transaction:

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

Every change of a handoff is a ``HandoffTransition``, written with the change.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

import jobs
from ingest import conf
from ingest.runs.models import IngestRun, IngestSource, RunStatus
from ingest.scraping import retrying
from ingest.scraping.hashing import canonical_json, digest
from ingest.scraping.models import (
    EXTERNAL_ID_LENGTH,
    SCRAPE_RUN_ID_LENGTH,
    HandoffReason,
    HandoffStatus,
    HandoffTransition,
    IngestionHandoff,
    ScrapeReference,
    ScrapeRun,
)

INGEST_REFERENCE = "ingest.IngestReference"
# Queued handoffs a sweep looks at (``settle_stuck_handoffs``).
SWEEP_LIMIT = 1000


class SyncRefused(Exception):
    """A sync's input that cannot be taken; ``field`` names what is wrong."""

    def __init__(self, field_name: str, message: str, *, too_many: bool = False) -> None:
        super().__init__(message)
        self.field = field_name
        self.too_many = too_many  # more references than one sync may bring


class HandoffRefused(Exception):
    """An operator action a handoff does not allow now; the message says why."""


def _user(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


# --- reading a sync's references --------------------------------------------------------------


@dataclass(frozen=True)
class Incoming:
    """A sync's references, checked: parallel lists, external ids distinct."""

    external_ids: list[str]
    payloads: list[str]  # canonical JSON text
    hashes: list[str]

    def __len__(self) -> int:
        return len(self.external_ids)


def read_references(items: Any) -> Incoming:
    """The references of a sync body: a list of ``{"external_id": str, "payload": {...}}``,
    at most ``SCRAPE_MAX_REFERENCES``, each external id once. ``SyncRefused`` names the
    first problem (``references[12].payload`` …); nothing is written for a refused sync."""
    if not isinstance(items, list):
        raise SyncRefused("references", "references must be a list of "
                                        '{"external_id": ..., "payload": {...}} objects')
    limit = int(conf.get("SCRAPE_MAX_REFERENCES"))
    if len(items) > limit:
        raise SyncRefused("references", f"{len(items):,} references in one sync; the limit is "
                                        f"{limit:,} (send the rest in further syncs of the same "
                                        "scrape run)", too_many=True)
    external_ids, payloads, hashes = [], [], []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        where = f"references[{index}]"
        if not isinstance(item, dict) or set(item) - {"external_id", "payload"}:
            raise SyncRefused(where, f"{where} must be an object with external_id and payload "
                                     "only")
        external_id, payload = item.get("external_id"), item.get("payload")
        if (not isinstance(external_id, str) or not 0 < len(external_id) <= EXTERNAL_ID_LENGTH
                or not _storable(external_id)):
            raise SyncRefused(f"{where}.external_id", f"{where}.external_id must be a string of "
                                                      f"1 to {EXTERNAL_ID_LENGTH} characters "
                                                      "(no NUL, no lone surrogate)")
        if external_id in seen:
            raise SyncRefused(f"{where}.external_id",
                              f"{where}.external_id {external_id!r} is also references"
                              f"[{seen[external_id]}]'s; each reference comes once per sync")
        seen[external_id] = index
        if not isinstance(payload, dict):
            raise SyncRefused(f"{where}.payload", f"{where}.payload must be a JSON object")
        try:
            text = canonical_json(payload)
        except UnicodeEncodeError:
            raise SyncRefused(f"{where}.payload", f"{where}.payload holds a lone surrogate "
                                                  "(\\ud800 …), which is no character") from None
        except ValueError as exc:  # NaN or Infinity
            raise SyncRefused(f"{where}.payload", f"{where}.payload: {exc}") from None
        if b"\\u0000" in text and _holds_nul(payload):
            raise SyncRefused(f"{where}.payload", f"{where}.payload holds a NUL character "
                                                  "(\\u0000), which cannot be stored")
        external_ids.append(external_id)
        payloads.append(text.decode())
        hashes.append(digest(text))
    # In the order of their ids: concurrent syncs then lock shared references in the same
    # order, and never deadlock on them.
    order = sorted(range(len(external_ids)), key=external_ids.__getitem__)
    return Incoming([external_ids[i] for i in order], [payloads[i] for i in order],
                    [hashes[i] for i in order])


def _storable(text: str) -> bool:
    """Whether PostgreSQL can store ``text``: no NUL, and valid UTF-8 (no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def check_scrape_run_id(value: Any) -> str:
    if (not isinstance(value, str) or not 0 < len(value.strip()) <= SCRAPE_RUN_ID_LENGTH
            or not _storable(value)):
        raise SyncRefused("scrape_run_id", f"scrape_run_id must be a non-empty string of at "
                                           f"most {SCRAPE_RUN_ID_LENGTH} characters")
    return value.strip()


# --- the sync ---------------------------------------------------------------------------------


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


def sync(source: IngestSource, scrape_run_id: Any, items: Any, *, actor: Any = None,
         policy: retrying.RetryPolicy | None = None,
         sleep: Callable[[float], None] = time.sleep) -> SyncResult:
    """Store a scrape run's references for ``source`` and hand each new payload off to
    ingestion, all in one transaction (see the module's docstring)."""
    run_id = check_scrape_run_id(scrape_run_id)
    incoming = read_references(items)
    policy = policy or default_policy()
    with transaction.atomic():
        now = jobs.now()
        scrape_run = _record_scrape_run(source, run_id, len(incoming), actor, now)
        upserted = _upsert_references(source, scrape_run, incoming, now)
        changed = upserted.changed
        ScrapeRun.objects.filter(pk=scrape_run.pk).update(
            references_changed=scrape_run.references_changed + len(changed))
        scrape_run.references_changed += len(changed)
        created = sum(1 for row in changed if row[2])
        counts = None
        if handoffs_available():
            counts = _hand_off(source, scrape_run, len(incoming), upserted, actor=actor,
                               now=now, policy=policy, sleep=sleep)
    return SyncResult(scrape_run, received=len(incoming), created=created,
                      changed=len(changed) - created, unchanged=len(incoming) - len(changed),
                      handoffs=counts)


def default_policy() -> retrying.RetryPolicy:
    return retrying.RetryPolicy(max_attempts=int(conf.get("HANDOFF_MAX_ATTEMPTS")),
                                base_seconds=float(conf.get("HANDOFF_BACKOFF_BASE_SECONDS")))


def _record_scrape_run(source: IngestSource, run_id: str, received: int, actor: Any,
                       now: Any) -> ScrapeRun:
    with connection.cursor() as cursor:
        cursor.execute(f"""
            INSERT INTO {ScrapeRun._meta.db_table} AS r (
                tenant_id, source_id, run_id, syncs, references_received, references_changed,
                first_sync_at, last_sync_at, last_synced_by_id)
            VALUES (%(tenant)s, %(source)s, %(run_id)s, 1, %(received)s, 0, %(now)s, %(now)s,
                    %(user)s)
            ON CONFLICT (source_id, run_id) DO UPDATE SET
                syncs = r.syncs + 1, references_received = r.references_received + %(received)s,
                last_sync_at = %(now)s, last_synced_by_id = %(user)s
            RETURNING id""", {"tenant": source.tenant_id, "source": source.pk, "run_id": run_id,
                              "received": received, "now": now,
                              "user": getattr(_user(actor), "pk", None)})
        pk = cursor.fetchone()[0]
    return ScrapeRun.objects.get(pk=pk)


@dataclass(frozen=True)
class Upserted:
    changed: list[tuple[int, str, bool]]  # (id, payload hash, created) of each written
    unchanged: list[int]  # the ids of the references whose payload hash was the same


def _upsert_references(source: IngestSource, scrape_run: ScrapeRun, incoming: Incoming,
                       now: Any) -> Upserted:
    """Insert new references and update those whose payload changed. The stored hashes
    are read first, so that an unchanged reference costs its id's lookup only: no payload
    sent, no write, no row lock."""
    if not incoming:
        return Upserted([], [])
    table = ScrapeReference._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT external_id, id, payload_hash FROM {table} "
                       "WHERE source_id = %s AND external_id = ANY(%s::text[])",
                       [source.pk, incoming.external_ids])
        stored = {external_id: (pk, hash_) for external_id, pk, hash_ in cursor.fetchall()}
        unchanged, write = [], []
        for index, external_id in enumerate(incoming.external_ids):
            known = stored.get(external_id)
            if known is not None and known[1] == incoming.hashes[index]:
                unchanged.append(known[0])
            else:
                write.append(index)
        if not write:
            return Upserted([], unchanged)
        # One JSON document of [external id, payload, hash] rows: PostgreSQL parses it
        # three times faster than a jsonb[] parameter of the same payloads.
        rows = ",".join(f'[{json.dumps(incoming.external_ids[i])},{incoming.payloads[i]},'
                        f'"{incoming.hashes[i]}"]' for i in write)
        cursor.execute(f"""
            INSERT INTO {table} AS r (
                tenant_id, source_id, external_id, payload, payload_hash, first_seen_at,
                changed_at, changed_in_id)
            SELECT %(tenant)s, %(source)s, i->>0, i->1, i->>2, %(now)s, %(now)s,
                   %(scrape_run)s
            FROM jsonb_array_elements(%(rows)s::jsonb) AS i
            ON CONFLICT (source_id, external_id) DO UPDATE SET
                payload = EXCLUDED.payload, payload_hash = EXCLUDED.payload_hash,
                changed_at = EXCLUDED.changed_at, changed_in_id = EXCLUDED.changed_in_id
            WHERE r.payload_hash <> EXCLUDED.payload_hash
            RETURNING r.id, r.payload_hash, xmax = 0""",
                       {"rows": f"[{rows}]", "source": source.pk, "tenant": source.tenant_id,
                        "now": now, "scrape_run": scrape_run.pk})
        return Upserted([(row[0], row[1], row[2]) for row in cursor.fetchall()], unchanged)


def _hand_off(source: IngestSource, scrape_run: ScrapeRun, received: int, upserted: Upserted,
              *, actor: Any, now: Any, policy: retrying.RetryPolicy,
              sleep: Callable[[float], None]) -> HandoffCounts:
    counts = HandoffCounts()
    new = [(pk, hash_) for pk, hash_, created in upserted.changed if created]
    changed = [(pk, hash_) for pk, hash_, created in upserted.changed if not created]
    opened = _open_handoffs(source, scrape_run, changed, actor=actor, now=now)
    # A changed reference whose payload's handoff is still queued or running (its payload
    # went back to one still on its way) has nothing new to hand off.
    counts.skip(HandoffReason.PAYLOAD_UNCHANGED, len(changed) - len(opened))
    _count_unchanged(upserted.unchanged, received - len(upserted.changed), counts)
    if new:
        _hand_off_new(source, scrape_run, new, counts, actor=actor, now=now, policy=policy,
                      sleep=sleep)
    if opened:
        _queue_with_retries(source, opened, counts, actor=actor, policy=policy, sleep=sleep)
    return counts


def _hand_off_new(source: IngestSource, scrape_run: ScrapeRun, new: list[tuple[int, str]],
                  counts: HandoffCounts, *, actor: Any, now: Any, policy: retrying.RetryPolicy,
                  sleep: Callable[[float], None]) -> None:
    """References this sync created have no handoff and no ingestion anywhere yet: each
    handoff is written already queued, with its ingestion job and both transitions (no
    second write of the row, the bulk of a first sync)."""
    table = IngestionHandoff._meta.db_table
    created = [("", HandoffStatus.QUEUED, HandoffReason.QUEUED_FROM_SCRAPE,
                f"scrape run {scrape_run.run_id}")]
    tries = 0

    def once() -> None:
        nonlocal tries
        tries += 1
        with transaction.atomic(), _lock_timeout(int(conf.get("HANDOFF_LOCK_TIMEOUT_MS"))):
            ids = _allocate(table, len(new))
            job_ids = jobs.enqueue_many(INGEST_REFERENCE, [{"handoff": pk} for pk in ids],
                                        tenant=source.tenant_id, created_by=_user(actor))
            _insert_handoffs(source, scrape_run, ids, new, job_ids=job_ids, attempts=tries,
                             status=HandoffStatus.QUEUED, reason=HandoffReason.INGESTION_JOB_QUEUED,
                             steps=[*created, (HandoffStatus.QUEUED, HandoffStatus.QUEUED,
                                               HandoffReason.INGESTION_JOB_QUEUED,
                                               "ingestion job queued")], actor=actor, now=now)

    refused = _attempt_queueing(source, once, policy, sleep)
    if refused is None:
        counts.queued += len(new)
        return
    reason, error, attempts = refused
    _insert_handoffs(source, scrape_run, _allocate(table, len(new)), new, job_ids=None,
                     attempts=attempts, status=HandoffStatus.FAILED, reason=reason,
                     last_error=error, actor=actor, now=now,
                     steps=[*created, (HandoffStatus.QUEUED, HandoffStatus.FAILED, reason, error)])
    counts.failed += len(new)


def _allocate(table: str, count: int) -> list[int]:
    """``count`` ids of ``table``'s sequence, so that rows can be named before they exist."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id')) "
                       "FROM generate_series(1, %s)", [table, count])
        return [row[0] for row in cursor.fetchall()]


def _insert_handoffs(source: IngestSource, scrape_run: ScrapeRun, ids: list[int],
                     rows: list[tuple[int, str]], *, job_ids: list[int] | None, attempts: int,
                     status: str, reason: str, steps: list[tuple[str, str, str, str]],
                     actor: Any, now: Any, last_error: str = "") -> None:
    """Handoffs ``ids`` of ``rows`` (reference id, payload hash), in ``status`` for
    ``reason``, with the transitions ``steps`` (from, to, reason, note) each: one
    statement."""
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH inserted AS (
                INSERT INTO {IngestionHandoff._meta.db_table} (
                    id, tenant_id, source_id, reference_id, payload_hash, scrape_run_id, status,
                    reason_code, attempts, last_error, job_id, ingest_run_id, created_by_id,
                    created_at, updated_at)
                SELECT r.id, %(tenant)s, %(source)s, r.reference_id, r.payload_hash,
                       %(scrape_run)s, %(status)s, %(reason)s, %(attempts)s, %(error)s, r.job_id,
                       NULL, %(user)s, %(now)s, %(now)s
                FROM unnest(%(ids)s::bigint[], %(refs)s::bigint[], %(hashes)s::text[],
                            %(jobs)s::bigint[]) AS r(id, reference_id, payload_hash, job_id)
                RETURNING id
            )
            INSERT INTO {HandoffTransition._meta.db_table} (
                handoff_id, at, from_status, to_status, reason_code, note, actor_id)
            SELECT i.id, %(now)s, s.from_status, s.to_status, s.reason_code, s.note, %(user)s
            FROM inserted i, unnest(%(from)s::text[], %(to)s::text[], %(reasons)s::text[],
                                    %(notes)s::text[]) WITH ORDINALITY
                 AS s(from_status, to_status, reason_code, note, step)
            ORDER BY i.id, s.step""",
                       {"ids": ids, "refs": [pk for pk, _ in rows],
                        "hashes": [hash_ for _, hash_ in rows],
                        "jobs": job_ids if job_ids is not None else [None] * len(ids),
                        "tenant": source.tenant_id, "source": source.pk,
                        "scrape_run": scrape_run.pk, "status": status, "reason": reason,
                        "attempts": attempts, "error": last_error[:4000],
                        "user": getattr(_user(actor), "pk", None), "now": now,
                        "from": [step[0] for step in steps], "to": [step[1] for step in steps],
                        "reasons": [step[2] for step in steps],
                        "notes": [step[3][:4000] for step in steps]})


def _open_handoffs(source: IngestSource, scrape_run: ScrapeRun,
                   changed: list[tuple[int, str]], *, actor: Any,
                   now: Any) -> list[tuple[int, int]]:
    """A queued handoff per payload of a reference that existed and changed: created, or a
    finished one of the same payload queued again. ``(handoff id, reference id)`` of each, with its
    transition written."""
    if not changed:
        return []
    table = IngestionHandoff._meta.db_table
    user = getattr(_user(actor), "pk", None)
    with connection.cursor() as cursor:
        cursor.execute(f"""
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
                    handoff_id, at, from_status, to_status, reason_code, note, actor_id)
                SELECT o.id, %(now)s, COALESCE(p.status, ''), %(queued)s, %(reason)s,
                       %(note)s, %(user)s
                FROM opened o LEFT JOIN previous p ON p.id = o.id
            )
            SELECT id, reference_id FROM opened""",
                       {"refs": [row[0] for row in changed], "hashes": [row[1] for row in changed],
                        "tenant": source.tenant_id, "source": source.pk,
                        "scrape_run": scrape_run.pk, "queued": HandoffStatus.QUEUED,
                        "completed": HandoffStatus.COMPLETED, "failed": HandoffStatus.FAILED,
                        "reason": HandoffReason.QUEUED_FROM_SCRAPE, "user": user, "now": now,
                        "note": f"scrape run {scrape_run.run_id}"})
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _count_unchanged(references: list[int], unchanged: int, counts: HandoffCounts) -> None:
    """Count the ``unchanged`` references whose payload did not change, by where their
    payload's handoff stands."""
    if not unchanged:
        return
    with connection.cursor() as cursor:
        cursor.execute(f"""
            SELECT h.status, count(*) FROM {ScrapeReference._meta.db_table} r
            JOIN {IngestionHandoff._meta.db_table} h
              ON h.reference_id = r.id AND h.payload_hash = r.payload_hash
            WHERE r.id = ANY(%s::bigint[])
            GROUP BY h.status""", [references])
        by_status = dict(cursor.fetchall())
    completed = by_status.get(HandoffStatus.COMPLETED, 0)
    failed = by_status.get(HandoffStatus.FAILED, 0)
    counts.completed += completed
    counts.failed += failed
    # Queued or running, or (stored before the handoff tables existed) none at all.
    counts.skip(HandoffReason.PAYLOAD_UNCHANGED, unchanged - completed - failed)


# --- queueing ingestions ----------------------------------------------------------------------


def _attempt_queueing(source: IngestSource, call: Callable[[], Any],
                      policy: retrying.RetryPolicy, sleep: Callable[[float], None]
                      ) -> tuple[str, str, int] | None:
    """Run ``call`` under the retry policy; None once it succeeded, else the reason the
    handoffs fail for, the error and the attempts made. A disabled source refuses at once."""
    if not source.enabled:
        return HandoffReason.QUEUE_REFUSED, f"source {source.name!r} is disabled", 1
    outcome = retrying.attempt(call, policy, sleep=sleep)
    if outcome.error is None:
        return None
    reason = (HandoffReason.RETRY_EXHAUSTED if outcome.exhausted
              else HandoffReason.QUEUE_REFUSED)
    return reason, f"{type(outcome.error).__name__}: {outcome.error}", outcome.attempts


def _queue_with_retries(source: IngestSource, opened: list[tuple[int, int]],
                        counts: HandoffCounts, *, actor: Any, policy: retrying.RetryPolicy,
                        sleep: Callable[[float], None]) -> None:
    done: list[tuple[int, int]] = []
    tries = 0

    def once() -> None:
        nonlocal tries
        tries += 1
        with transaction.atomic():  # a savepoint: a failed try leaves nothing behind
            # The sync's upsert holds every reference of ``opened`` already.
            done[:] = [queue(source, opened, actor=actor, locked=True)]

    refused = _attempt_queueing(source, once, policy, sleep)
    if refused is None:
        queued, waiting = done[0]
        counts.queued += queued
        counts.skip(HandoffReason.INGESTION_JOB_ALREADY_ACTIVE, waiting)
        if tries > 1:
            IngestionHandoff.objects.filter(pk__in=[h for h, _ in opened]).update(attempts=tries)
        return
    reason, error, attempts = refused
    _fail(opened, reason, error, attempts=attempts, actor=actor)
    counts.failed += len(opened)


def queue(source: IngestSource, opened: Sequence[tuple[int, int]], *, actor: Any = None,
          reason: str = HandoffReason.INGESTION_JOB_QUEUED, locked: bool = False
          ) -> tuple[int, int]:
    """Queue the ingestion of each handoff ``(id, reference id)`` whose reference has
    none queued or running; the others wait for it. In the caller's transaction, holding
    the references' rows (taken here unless ``locked``). A lock it cannot have within
    ``INGEST_HANDOFF_LOCK_TIMEOUT_MS`` (a reference's row, the job queue's table) is a
    transient error. Returns (queued, waiting)."""
    references = sorted({reference for _, reference in opened})
    with _lock_timeout(int(conf.get("HANDOFF_LOCK_TIMEOUT_MS"))):
        if not locked:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT id FROM {ScrapeReference._meta.db_table} "
                               "WHERE id = ANY(%s) ORDER BY id FOR UPDATE", [references])
        return _queue_locked(source, opened, references, actor=actor, reason=reason)


@contextlib.contextmanager
def _lock_timeout(milliseconds: int) -> Iterator[None]:
    """Within the caller's transaction: a lock not had within ``milliseconds`` raises
    (SQLSTATE 55P03, a transient error) instead of waiting on."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, "
                       "true)", [f"{milliseconds}ms"])
        previous = cursor.fetchone()[0]
    yield
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])


def _queue_locked(source: IngestSource, opened: Sequence[tuple[int, int]],
                  references: list[int], *, actor: Any, reason: str) -> tuple[int, int]:
    busy = active_references(references, excluding=[handoff for handoff, _ in opened])
    ready = [handoff for handoff, reference in opened if reference not in busy]
    waiting = [handoff for handoff, reference in opened if reference in busy]
    now = jobs.now()
    if waiting:
        _move(waiting, HandoffStatus.QUEUED, HandoffReason.INGESTION_JOB_ALREADY_ACTIVE,
              note="waits for the reference's ingestion in progress", actor=actor, now=now)
    if ready:
        job_ids = jobs.enqueue_many(INGEST_REFERENCE, [{"handoff": h} for h in ready],
                                    tenant=source.tenant_id, created_by=_user(actor))
        _move(ready, HandoffStatus.QUEUED, reason, note="ingestion job queued", actor=actor,
              now=now, job_ids=job_ids)
    return len(ready), len(waiting)


def active_references(references: Sequence[int], *, excluding: Sequence[int] = ()) -> set[int]:
    """The references among these whose ingestion is queued (its job is) or running,
    not counting the handoffs ``excluding``."""
    if not references:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(f"""
            SELECT reference_id FROM {IngestionHandoff._meta.db_table}
            WHERE reference_id = ANY(%(refs)s::bigint[]) AND NOT id = ANY(%(excluding)s::bigint[])
              AND (status = %(running)s OR (status = %(queued)s AND job_id IS NOT NULL))
            UNION
            SELECT reference_id FROM {IngestRun._meta.db_table}
            WHERE reference_id = ANY(%(refs)s::bigint[]) AND status = %(run_running)s""",
                       {"refs": list(references), "excluding": list(excluding),
                        "running": HandoffStatus.RUNNING, "queued": HandoffStatus.QUEUED,
                        "run_running": RunStatus.RUNNING})
        return {row[0] for row in cursor.fetchall()}


# --- transitions ------------------------------------------------------------------------------


def _move(handoffs: Sequence[int], status: str, reason: str, *, note: str = "",
          actor: Any = None, now: Any = None, job_ids: Sequence[int] | None = None,
          **fields: Any) -> None:
    """Move ``handoffs`` to ``status`` for ``reason``, setting ``fields`` too (and each its
    job id, from the parallel ``job_ids``), each with its transition: one statement."""
    if not handoffs:
        return
    meta = IngestionHandoff._meta
    assignments = [f"{connection.ops.quote_name(meta.get_field(name).column)} = %(f_{name})s"
                   for name in fields]
    values = {f"f_{name}": getattr(value, "pk", value) for name, value in fields.items()}
    if job_ids is not None:
        assignments.append("job_id = m.job_id")
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH m AS (
                SELECT * FROM unnest(%(ids)s::bigint[], %(jobs)s::bigint[]) AS m(id, job_id)
            ), before AS (
                SELECT h.id, h.status FROM {meta.db_table} h JOIN m USING (id)
                ORDER BY h.id FOR UPDATE OF h
            ), moved AS (
                UPDATE {meta.db_table} h
                SET {", ".join(["status = %(status)s", "reason_code = %(reason)s", *assignments])}
                FROM before b JOIN m USING (id) WHERE h.id = b.id
                RETURNING h.id, b.status AS before
            )
            INSERT INTO {HandoffTransition._meta.db_table} (
                handoff_id, at, from_status, to_status, reason_code, note, actor_id)
            SELECT id, %(now)s, before, %(status)s, %(reason)s, %(note)s, %(actor)s
            FROM moved""",
                       {"ids": list(handoffs),
                        "jobs": list(job_ids) if job_ids is not None else [None] * len(handoffs),
                        "status": status, "reason": reason, "now": now or jobs.now(),
                        "note": note[:4000], "actor": getattr(_user(actor), "pk", None),
                        **values})


def _fail(opened: Sequence[tuple[int, int]], reason: str, error: str, *, attempts: int,
          actor: Any) -> None:
    _move([h for h, _ in opened], HandoffStatus.FAILED, reason, note=error, actor=actor,
          attempts=attempts, last_error=error[:4000])


def json_counts(counts: HandoffCounts) -> dict[str, Any]:
    return {"handoff_queued_count": counts.queued, "handoff_completed_count": counts.completed,
            "handoff_failed_count": counts.failed, "handoff_skipped_count": counts.skipped,
            "handoff_skipped_reasons": {str(k): v for k, v in sorted(counts.reasons.items()) if v}}



# --- following the ingestion ------------------------------------------------------------------


def start_ingestion(handoff_id: int, *, tenant: int | None, job_id: int, pipeline: Any) -> str:
    """The job ``job_id`` of a queued handoff starts the reference's ingest run (in the
    job's ``pipeline``) and the handoff runs. What it did, in words; a handoff that moved
    on meanwhile (retried, superseded) is left alone."""
    from ingest.runs import services as runs

    handoff = (IngestionHandoff.objects.select_related("source", "created_by")
               .filter(pk=handoff_id, tenant_id=tenant).first())
    if handoff is None:
        raise HandoffRefused(f"handoff {handoff_id} is not one of this job's tenant's")
    reference = ScrapeReference.objects.select_for_update().get(pk=handoff.reference_id)
    handoff = IngestionHandoff.objects.select_for_update().get(pk=handoff.pk)
    if handoff.status != HandoffStatus.QUEUED or handoff.job_id != job_id:
        return f"handoff {handoff.pk} is {handoff.status}, no longer this job's"
    try:
        run = runs.start_ingest(handoff.source, actor=handoff.created_by, via="scrape",
                                reference=reference, pipeline=pipeline)
    except runs.RunRefused as exc:
        _move([handoff.pk], HandoffStatus.FAILED, HandoffReason.QUEUE_REFUSED, note=str(exc),
              last_error=str(exc)[:4000])
        return f"handoff {handoff.pk} failed: {exc}"
    _move([handoff.pk], HandoffStatus.RUNNING, HandoffReason.INGESTION_STARTED,
          note=f"ingest run {run.pk}", ingest_run=run)
    return f"handoff {handoff.pk}: ingest run {run.pk} started"


OUTCOMES = {
    RunStatus.SUCCEEDED: (HandoffStatus.COMPLETED, HandoffReason.INGESTION_COMPLETED),
    RunStatus.FAILED: (HandoffStatus.FAILED, HandoffReason.INGESTION_FAILED),
    RunStatus.CANCELLED: (HandoffStatus.FAILED, HandoffReason.INGESTION_CANCELLED),
}


def settle_for_run(run: IngestRun) -> str:
    """A reference's ingest run ended: its handoff takes the run's outcome, and the
    newest payload that waited for it is queued (older waiting ones are superseded)."""
    if run.reference_id is None or run.status not in OUTCOMES:
        return "not a finished run of a reference"
    ScrapeReference.objects.select_for_update().get(pk=run.reference_id)
    status, reason = OUTCOMES[RunStatus(run.status)]
    settled = list(IngestionHandoff.objects.filter(ingest_run=run).exclude(
        status=status, reason_code=reason).values_list("pk", flat=True))
    if settled:
        _move(settled, status, reason, note=run.failure_reason or f"ingest run {run.pk} {run.status}",
              last_error=run.failure_reason[:4000] if status == HandoffStatus.FAILED else "")
    return f"{len(settled)} handoff(s) settled; " + queue_next(run.reference_id)


def queue_next(reference_id: int, *, actor: Any = None) -> str:
    """Queue the newest handoff waiting for ``reference_id``'s ingestion, if none is
    active any more; older waiting ones are superseded. The caller holds the reference."""
    if active_references([reference_id]):
        return "the reference's ingestion is still active"
    waiting = list(IngestionHandoff.objects.filter(
        reference_id=reference_id, status=HandoffStatus.QUEUED, job_id__isnull=True)
        .order_by("-id").values_list("pk", "source_id"))
    if not waiting:
        return "nothing waits"
    (newest, source_id), older = waiting[0], [pk for pk, _ in waiting[1:]]
    if older:
        _move(older, HandoffStatus.FAILED, HandoffReason.SUPERSEDED,
              note=f"handoff {newest} brought a newer payload")
    queue(IngestSource.objects.get(pk=source_id), [(newest, reference_id)], actor=actor)
    return f"handoff {newest} queued"


@transaction.atomic
def retry_handoffs(handoffs: Iterable[IngestionHandoff], *, actor: Any = None) -> int:
    """Queue failed handoffs again (an operator's action, recorded with the actor). Only
    the reference's latest payload is retried: a failed handoff whose reference has moved
    on to another payload is refused. How many were queued or set waiting."""
    retried = 0
    for handoff in handoffs:
        reference = ScrapeReference.objects.select_for_update().get(pk=handoff.reference_id)
        current = IngestionHandoff.objects.select_for_update().get(pk=handoff.pk)
        if current.status != HandoffStatus.FAILED:
            raise HandoffRefused(f"handoff {current.pk} is {current.status}, not failed")
        if current.payload_hash != reference.payload_hash:
            raise HandoffRefused(f"handoff {current.pk} is of an older payload of reference "
                                 f"{reference.external_id!r}; only its latest is ingested")
        _move([current.pk], HandoffStatus.QUEUED, HandoffReason.RETRIED_BY_OPERATOR,
              note="retried", actor=actor, attempts=0, last_error="", job_id=None,
              ingest_run=None)
        queue(current.source, [(current.pk, reference.pk)], actor=actor)
        retried += 1
    return retried


def settle_stuck_handoffs() -> int:
    """The safety net: a handoff queued behind a job whose whole pipeline ended without
    starting the run (the job failed or was cancelled) fails, and the next payload of its
    reference is queued; a running handoff whose run ended takes the run's outcome. How
    many were settled."""
    settled = 0
    # The longest-queued first, a bounded number a sweep: a backlog of queued jobs is
    # not stuck, and the next sweep goes on from here.
    queued = dict(IngestionHandoff.objects.filter(status=HandoffStatus.QUEUED,
                                                  job_id__isnull=False)
                  .order_by("updated_at", "id").values_list("job_id", "pk")[:SWEEP_LIMIT])
    for job_id in jobs.pipelines_over(list(queued), before=jobs.now()):
        with transaction.atomic():
            handoff = IngestionHandoff.objects.get(pk=queued[job_id])
            ScrapeReference.objects.select_for_update().get(pk=handoff.reference_id)
            moved = IngestionHandoff.objects.filter(pk=handoff.pk, status=HandoffStatus.QUEUED,
                                                    job_id=job_id).exists()
            if moved:
                _move([handoff.pk], HandoffStatus.FAILED, HandoffReason.INGESTION_FAILED,
                      note=f"its ingestion job {job_id} ended without starting the run",
                      last_error=f"ingestion job {job_id} ended without starting the run")
                queue_next(handoff.reference_id)
                settled += 1
    for run in IngestRun.objects.filter(handoffs__status=HandoffStatus.RUNNING).exclude(
            status=RunStatus.RUNNING).distinct():
        with transaction.atomic():
            settle_for_run(run)
            settled += 1
    return settled
