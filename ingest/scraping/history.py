"""Writing handoffs with their history: every statement here changes handoffs and records
each change as a ``HandoffTransition`` in the same statement, so that no move goes
unrecorded and many handoffs cost one round trip."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

import jobs
from ingest.runs.models import IngestSource
from ingest.scraping.models import HandoffTransition, IngestionHandoff, ScrapeRun


def actor_user(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


def database_now() -> datetime:
    """The database's clock now (not its transaction's start): the one that writes a
    handoff's ``updated_at``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now: datetime = cursor.fetchone()[0]
        return now


def allocate_ids(table: str, count: int) -> list[int]:
    """``count`` ids of ``table``'s sequence, so that rows can be named before they exist."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)", [table, count]
        )
        return [row[0] for row in cursor.fetchall()]


_INSERT = f"""
    WITH inserted AS (
        INSERT INTO {IngestionHandoff._meta.db_table} (
            id, tenant_id, source_id, reference_id, payload_hash, scrape_run_id, status,
            reason_code, attempts, last_error, job_id, ingest_run_id, created_by_id,
            created_at, updated_at)
        SELECT r.id, %(tenant)s, %(source)s, r.reference_id, r.payload_hash, %(scrape_run)s,
               %(status)s, %(reason)s, %(attempts)s, %(error)s, r.job_id, NULL, %(user)s,
               %(now)s, %(now)s
        FROM unnest(%(ids)s::bigint[], %(refs)s::bigint[], %(hashes)s::text[],
                    %(jobs)s::bigint[]) AS r(id, reference_id, payload_hash, job_id)
        RETURNING id
    )
    INSERT INTO {HandoffTransition._meta.db_table} (
        handoff_id, at, from_status, to_status, kind, message, actor_id)
    SELECT i.id, %(now)s, s.from_status, s.to_status, s.kind, s.message, %(user)s
    FROM inserted i, unnest(%(from)s::text[], %(to)s::text[], %(reasons)s::text[],
                            %(messages)s::text[]) WITH ORDINALITY
         AS s(from_status, to_status, kind, message, step)
    ORDER BY i.id, s.step"""


def insert(
    source: IngestSource,
    scrape_run: ScrapeRun,
    ids: list[int],
    rows: list[tuple[int, str]],
    *,
    job_ids: list[int] | None,
    attempts: int,
    status: str,
    reason: str,
    steps: list[tuple[str, str, str, str]],
    actor: Any,
    now: Any,
    last_error: str = "",
) -> None:
    """Handoffs ``ids`` of ``rows`` (reference id, payload hash), in ``status`` for
    ``reason``, with the transitions ``steps`` (from, to, reason, message) each: one
    statement, its parameters bound server-side (``jobs.execute_prepared``), which sends
    arrays of many thousand ids without quoting each in Python."""
    jobs.execute_prepared(
        _INSERT,
        {
            "ids": ids,
            "refs": [pk for pk, _ in rows],
            "hashes": [hash_ for _, hash_ in rows],
            "jobs": job_ids if job_ids is not None else [None] * len(ids),
            "tenant": source.tenant_id,
            "source": source.pk,
            "scrape_run": scrape_run.pk,
            "status": status,
            "reason": reason,
            "attempts": attempts,
            "error": last_error[:4000],
            "user": getattr(actor_user(actor), "pk", None),
            "now": now,
            "from": [step[0] for step in steps],
            "to": [step[1] for step in steps],
            "reasons": [step[2] for step in steps],
            "messages": [step[3][:4000] for step in steps],
        },
    )


def move(
    handoffs: Sequence[int],
    status: str,
    reason: str,
    *,
    message: str = "",
    actor: Any = None,
    via: str = "",
    now: Any = None,
    job_ids: Sequence[int] | None = None,
    detail: dict[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Move ``handoffs`` to ``status`` for ``reason``, setting ``fields`` too (and each its
    job id, from the parallel ``job_ids``), each with its transition (by ``actor``, through
    ``via`` when an operator's, with ``detail`` as data): one statement."""
    if not handoffs:
        return
    meta = IngestionHandoff._meta
    assignments = [
        f"{connection.ops.quote_name(meta.get_field(name).column)} = %(f_{name})s" for name in fields
    ]
    values = {f"f_{name}": getattr(value, "pk", value) for name, value in fields.items()}
    if job_ids is not None:
        assignments.append("job_id = m.job_id")
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
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
                handoff_id, at, from_status, to_status, kind, message, actor_id, via, detail)
            SELECT id, %(now)s, before, %(status)s, %(reason)s, %(message)s, %(actor)s, %(via)s,
                   %(detail)s::jsonb
            FROM moved""",
            {
                "ids": list(handoffs),
                "jobs": list(job_ids) if job_ids is not None else [None] * len(handoffs),
                "status": status,
                "reason": reason,
                "now": now or jobs.now(),
                "message": message[:4000],
                "actor": getattr(actor_user(actor), "pk", None),
                "via": via,
                "detail": json.dumps(detail or {}),
                **values,
            },
        )
