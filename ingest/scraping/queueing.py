"""Queueing handoffs' ingestions: one engine job per handoff, unless the reference's
ingestion is already queued or running, retried on transient errors only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

import jobs
from ingest import conf
from ingest.runs.models import IngestRun, IngestSource, RunStatus
from ingest.scraping import history, retrying
from ingest.scraping.models import HandoffReason, HandoffStatus, IngestionHandoff, ScrapeReference

INGEST_REFERENCE = "ingest.IngestReference"
# Queued handoffs a sweep looks at (``settle_stuck_handoffs``).


@dataclass(frozen=True)
class Attempted:
    attempts: int
    value: Any = None  # what the call returned, once it succeeded
    refused: tuple[str, str] | None = None  # else the reason the handoffs fail for, and why


def attempt(
    source: IngestSource,
    call: Callable[[int], Any],
    policy: retrying.RetryPolicy,
    sleep: Callable[[float], None],
) -> Attempted:
    """Run ``call`` (given the attempt's number) under the retry policy. A disabled
    source refuses at once; an error refuses with ``retry_exhausted`` once transient
    errors used every attempt, else with ``queue_refused``."""
    if not source.enabled:
        return Attempted(1, refused=(HandoffReason.QUEUE_REFUSED, f"source {source.name!r} is disabled"))
    outcome = retrying.attempt(call, policy, sleep=sleep)
    if outcome.error is None:
        return Attempted(outcome.attempts, value=outcome.value)
    reason = HandoffReason.RETRY_EXHAUSTED if outcome.exhausted else HandoffReason.QUEUE_REFUSED
    return Attempted(outcome.attempts, refused=(reason, f"{type(outcome.error).__name__}: {outcome.error}"))


def queue(
    source: IngestSource,
    opened: Sequence[tuple[int, int]],
    *,
    actor: Any = None,
    via: str = "",
    reason: str = HandoffReason.INGESTION_JOB_QUEUED,
    locked: bool = False,
) -> tuple[int, int]:
    """Queue the ingestion of each handoff ``(id, reference id)`` whose reference has
    none queued or running; the others wait for it. In the caller's transaction, holding
    the references' rows (taken here unless ``locked``). A lock it cannot have within
    ``INGEST_HANDOFF_LOCK_TIMEOUT_MS`` (a reference's row, the job queue's table) is a
    transient error. The transitions name ``actor`` and, for an operator's, ``via``.
    Returns (queued, waiting)."""
    references = sorted({reference for _, reference in opened})
    with lock_timeout(int(conf.get("HANDOFF_LOCK_TIMEOUT_MS"))):
        if not locked:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT id FROM {ScrapeReference._meta.db_table} "
                    "WHERE id = ANY(%s) ORDER BY id FOR UPDATE",
                    [references],
                )
        return _queue_locked(source, opened, references, actor=actor, via=via, reason=reason)


@contextlib.contextmanager
def lock_timeout(milliseconds: int) -> Iterator[None]:
    """Within the caller's transaction: a lock not had within ``milliseconds`` raises
    (SQLSTATE 55P03, a transient error) instead of waiting on."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
            [f"{milliseconds}ms"],
        )
        previous = cursor.fetchone()[0]
    yield
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])


def _queue_locked(
    source: IngestSource,
    opened: Sequence[tuple[int, int]],
    references: list[int],
    *,
    actor: Any,
    via: str,
    reason: str,
) -> tuple[int, int]:
    busy = active_references(references, excluding=[handoff for handoff, _ in opened])
    ready = [handoff for handoff, reference in opened if reference not in busy]
    waiting = [handoff for handoff, reference in opened if reference in busy]
    now = jobs.now()
    if waiting:
        history.move(
            waiting,
            HandoffStatus.QUEUED,
            HandoffReason.INGESTION_JOB_ALREADY_ACTIVE,
            message="waits for the reference's ingestion in progress",
            actor=actor,
            via=via,
            now=now,
        )
    if ready:
        job_ids = jobs.enqueue_many(
            INGEST_REFERENCE,
            [{"handoff": h} for h in ready],
            tenant=source.tenant_id,
            created_by=history.actor_user(actor),
        )
        history.move(
            ready,
            HandoffStatus.QUEUED,
            reason,
            message="ingestion job queued",
            actor=actor,
            via=via,
            now=now,
            job_ids=job_ids,
        )
    return len(ready), len(waiting)


def active_references(references: Sequence[int], *, excluding: Sequence[int] = ()) -> set[int]:
    """The references among these whose ingestion is queued (its job is) or running,
    not counting the handoffs ``excluding``."""
    if not references:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT reference_id FROM {IngestionHandoff._meta.db_table}
            WHERE reference_id = ANY(%(refs)s::bigint[]) AND NOT id = ANY(%(excluding)s::bigint[])
              AND (status = %(running)s OR (status = %(queued)s AND job_id IS NOT NULL))
            UNION
            SELECT reference_id FROM {IngestRun._meta.db_table}
            WHERE reference_id = ANY(%(refs)s::bigint[]) AND status = %(run_running)s""",
            {
                "refs": list(references),
                "excluding": list(excluding),
                "running": HandoffStatus.RUNNING,
                "queued": HandoffStatus.QUEUED,
                "run_running": RunStatus.RUNNING,
            },
        )
        return {row[0] for row in cursor.fetchall()}
