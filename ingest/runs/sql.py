"""The run pipeline's per-batch statements, written as SQL because every batch runs them.

Each delivery loads what it works on in one query (a run with its source; a batch with
its run, source, tenant and hook executions) and writes its step in as few: a batch with
its executions and the run's counters in one statement, a batch's records and its
``published`` mark in two. Through the ORM these took select_related joins over up to
six models and a round trip per table, and building each queryset, compiling it and
having PostgreSQL plan it again cost several times what running it did (about 2.5 ms
against 0.3 ms to load a batch with its hooks). Here each statement is written once and
prepared on the connection (``jobs.execute_prepared``), and rows become the model
instances the ORM would have built, related objects attached. ``tests/ingest/test_sql.py``
holds them equal to the ORM's.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, TypeVar, cast

from django.db import connection
from django.db.models import Model

import jobs
from ingest.runs.models import (
    BatchStatus,
    ExecutionStatus,
    Hook,
    HookExecution,
    HookTemplate,
    IngestBatch,
    IngestRecord,
    IngestRun,
    IngestSource,
    RunStatus,
)
from tenancy.models import Tenant

M = TypeVar("M", bound=Model)


def _columns(model: type[Model], alias: str) -> str:
    quote = connection.ops.quote_name
    # A concrete field is one with a column.
    return ", ".join(f"{alias}.{quote(cast(str, field.column))}" for field in model._meta.concrete_fields)


def _instance(model: type[M], row: tuple[Any, ...], start: int) -> tuple[M | None, int]:
    """The ``model`` instance whose columns begin at ``row[start]`` (None if they are all
    NULL, as an outer join leaves them), and where the next model's begin."""
    fields = model._meta.concrete_fields
    values = row[start : start + len(fields)]
    end = start + len(fields)
    if all(value is None for value in values):
        return None, end
    return model.from_db(connection.alias, [field.attname for field in fields], values), end


def _joined(model: type[M], row: tuple[Any, ...], start: int) -> tuple[M, int]:
    """``_instance`` for a model reached by an inner join, whose columns are never all NULL."""
    found, end = _instance(model, row, start)
    if found is None:
        raise ValueError(f"no {model.__name__} in an inner-joined row")
    return found, end


def _tables() -> dict[str, str]:
    quote = connection.ops.quote_name
    tables = {
        model.__name__: quote(model._meta.db_table)
        for model in (
            Hook,
            HookExecution,
            HookTemplate,
            IngestBatch,
            IngestRecord,
            IngestRun,
            IngestSource,
            Tenant,
        )
    }
    offers = quote(HookTemplate.tenants.through._meta.db_table)
    return {**tables, "HookTemplateTenants": offers}


@cache
def _run_for_fetch() -> str:
    t = _tables()
    return f"""
SELECT {_columns(IngestRun, "r")}, {_columns(IngestSource, "s")}, {_columns(Tenant, "t")},
       EXISTS (SELECT FROM {t["IngestBatch"]} b
               WHERE b.run_id = r.id AND b.sequence = %(sequence)s),
       (SELECT b.session_out FROM {t["IngestBatch"]} b
        WHERE b.run_id = r.id AND b.sequence = %(sequence)s - 1)
FROM {t["IngestRun"]} r JOIN {t["IngestSource"]} s ON s.id = r.source_id
JOIN {t["Tenant"]} t ON t.id = r.tenant_id
WHERE r.id = %(run)s AND r.tenant_id IS NOT DISTINCT FROM %(tenant)s::bigint
"""


def run_for_fetch(*, run: int, tenant: int | None, sequence: int) -> IngestRun | None:
    """Run ``run`` of ``tenant`` with its source and tenant, and ``batch_fetched`` (whether batch
    ``sequence`` exists) and ``previous_session`` (what batch ``sequence - 1`` left; None
    if there is no such batch) set on it."""
    row = jobs.execute_prepared(
        _run_for_fetch(), {"run": run, "tenant": tenant, "sequence": sequence}, binary=True
    ).fetchone()
    if row is None:
        return None
    found, at = _joined(IngestRun, row, 0)
    found.source, at = _joined(IngestSource, row, at)
    found.tenant, at = _joined(Tenant, row, at)
    found.batch_fetched, found.previous_session = row[at], row[at + 1]
    return found


@cache
def _batch_with_hooks() -> str:
    t = _tables()
    return f"""
SELECT {_columns(IngestBatch, "b")}, {_columns(IngestRun, "r")}, {_columns(IngestSource, "s")},
       {_columns(Tenant, "t")}, {_columns(HookExecution, "e")}, {_columns(Hook, "h")},
       {_columns(HookTemplate, "ht")},
       NOT EXISTS (SELECT FROM {t["HookTemplateTenants"]} o WHERE o.hooktemplate_id = ht.id)
       OR EXISTS (SELECT FROM {t["HookTemplateTenants"]} o
                  WHERE o.hooktemplate_id = ht.id AND o.tenant_id = r.tenant_id)
FROM {t["IngestBatch"]} b
JOIN {t["IngestRun"]} r ON r.id = b.run_id
JOIN {t["IngestSource"]} s ON s.id = r.source_id
JOIN {t["Tenant"]} t ON t.id = r.tenant_id
LEFT JOIN {t["HookExecution"]} e ON e.batch_id = b.id
LEFT JOIN {t["Hook"]} h ON h.id = e.hook_id
LEFT JOIN {t["HookTemplate"]} ht ON ht.id = h.template_id
WHERE b.id = %(batch)s AND b.run_id = %(run)s AND r.tenant_id IS NOT DISTINCT FROM %(tenant)s::bigint
ORDER BY e.position
"""


def batch_with_hooks(
    *, batch: int, run: int, tenant: int | None
) -> tuple[IngestBatch | None, list[HookExecution]]:
    """Batch ``batch`` of ``run`` (within ``tenant``) with its run, source and tenant, and
    its hook executions in order, each with its hook (None if the hook was removed) and
    the hook's catalogue entry, and sharing that one batch object. Each entry's
    ``offered`` says whether it is offered to the run's tenant."""
    rows = jobs.execute_prepared(
        _batch_with_hooks(), {"batch": batch, "run": run, "tenant": tenant}, binary=True
    ).fetchall()
    if not rows:
        return None, []
    found, at = _joined(IngestBatch, rows[0], 0)
    found.run, at = _joined(IngestRun, rows[0], at)
    found.run.source, at = _joined(IngestSource, rows[0], at)
    found.run.tenant, at = _joined(Tenant, rows[0], at)
    executions = []
    for row in rows:
        execution, after = _instance(HookExecution, row, at)
        if execution is None:  # the batch has no hooks
            continue
        execution.hook, after = _instance(Hook, row, after)
        if execution.hook is not None:
            execution.hook.template, after = _joined(HookTemplate, row, after)
            execution.hook.template.offered = row[after]
        execution.batch = found
        executions.append(execution)
    return found, executions


@cache
def _batch_to_publish() -> str:
    t = _tables()
    return f"""
SELECT {_columns(IngestBatch, "b")}, {_columns(IngestRun, "r")}, {_columns(IngestSource, "s")},
       {_columns(Tenant, "t")}
FROM {t["IngestBatch"]} b
JOIN {t["IngestRun"]} r ON r.id = b.run_id
JOIN {t["IngestSource"]} s ON s.id = r.source_id
JOIN {t["Tenant"]} t ON t.id = r.tenant_id
WHERE b.id = %(batch)s AND b.run_id = %(run)s AND r.tenant_id IS NOT DISTINCT FROM %(tenant)s::bigint
FOR NO KEY UPDATE OF b, r
"""


def batch_to_publish(*, batch: int, run: int, tenant: int | None) -> IngestBatch | None:
    """Batch ``batch`` of ``run`` (within ``tenant``) with its run, source and tenant, the
    batch and the run locked until the caller's transaction ends."""
    row = jobs.execute_prepared(
        _batch_to_publish(), {"batch": batch, "run": run, "tenant": tenant}, binary=True
    ).fetchone()
    if row is None:
        return None
    found, at = _joined(IngestBatch, row, 0)
    found.run, at = _joined(IngestRun, row, at)
    found.run.source, at = _joined(IngestSource, row, at)
    found.run.tenant, _ = _joined(Tenant, row, at)
    return found


@cache
def _record_batch() -> str:
    t = _tables()
    return f"""
WITH moved AS (
    UPDATE {t["IngestRun"]}
    SET batches_ingested = batches_ingested + 1, ingest_done = NOT %(has_more)s
    WHERE id = %(run)s AND status = %(running)s
      AND NOT EXISTS (SELECT FROM {t["IngestBatch"]}
                      WHERE run_id = %(run)s AND sequence = %(sequence)s)
    RETURNING id, source_id, tenant_id
), batch AS (
    INSERT INTO {t["IngestBatch"]} (
        run_id, sequence, status, records, session_in, session_out, has_more, location,
        fetch_ms, fetched_at, checked_at, published_at)
    SELECT moved.id, %(sequence)s, %(fetched)s, %(records)s, %(session_in)s::jsonb,
           %(session_out)s::jsonb, %(has_more)s, %(location)s, %(fetch_ms)s, %(now)s, NULL, NULL
    FROM moved
    RETURNING *
), executions AS (
    INSERT INTO {t["HookExecution"]} (
        batch_id, hook_id, hook_name, tenant_id, position, status, tries, runner_target,
        runner_ref, launched_at, pod_phase, exit_code, reason, log_tail, scheduled, finished_at)
    SELECT batch.id, h.id, h.name, moved.tenant_id,
           row_number() OVER (ORDER BY h.position, h.name) - 1,
           %(waiting)s, 0, '', '', NULL, '', NULL, '', '', false, NULL
    FROM batch, moved JOIN {t["Hook"]} h ON h.source_id = moved.source_id
)
SELECT {_columns(IngestBatch, "batch")} FROM batch
"""


def record_batch(
    *,
    run: int,
    sequence: int,
    records: int,
    session_in: Any,
    session_out: Any,
    has_more: bool,
    location: str,
    fetch_ms: int,
    now: Any,
) -> IngestBatch | None:
    """Batch ``sequence`` of running run ``run`` and its hook executions (one per hook of
    the run's source now, in the hooks' order), with the run's counters moved, in one
    statement; None, and nothing written, if the run has ended or the batch exists. Its
    first UPDATE takes the run's row lock, so a cancel waits for the batch or the batch
    sees the run ended; an attempt racing another to the same batch fails on the batch's
    unique constraint."""
    row = jobs.execute_prepared(
        _record_batch(),
        {
            "run": run,
            "sequence": sequence,
            "records": records,
            "has_more": has_more,
            "session_in": json.dumps(session_in),
            "session_out": json.dumps(session_out),
            "location": location,
            "fetch_ms": fetch_ms,
            "now": now,
            "running": RunStatus.RUNNING,
            "fetched": BatchStatus.FETCHED,
            "waiting": ExecutionStatus.WAITING,
        },
        binary=True,
    ).fetchone()
    return None if row is None else _instance(IngestBatch, row, 0)[0]


@cache
def _insert_records() -> str:
    t = _tables()
    return f"""
INSERT INTO {t["IngestRecord"]} (source_id, batch_id, position, key, data)
SELECT %(source)s, %(batch)s, %(first)s + r.position - 1, r.key, r.data
FROM unnest(%(keys)s::text[], %(data)s::jsonb[]) WITH ORDINALITY AS r(key, data, position)
"""


def insert_records(*, source: int, batch: int, first: int, keys: list[str], data: list[str]) -> None:
    """Records of ``batch`` at positions ``first``, ``first + 1`` …: their keys, and their
    data as JSON text."""
    jobs.execute_prepared(
        _insert_records(), {"source": source, "batch": batch, "first": first, "keys": keys, "data": data}
    )


@cache
def _mark_published() -> str:
    t = _tables()
    return f"""
WITH published AS (
    UPDATE {t["IngestBatch"]} SET status = %(published)s, published_at = %(now)s
    WHERE id = %(batch)s
    RETURNING run_id
)
UPDATE {t["IngestRun"]}
SET batches_published = batches_published + 1, records_published = records_published + %(count)s
WHERE id = (SELECT run_id FROM published)
"""


def mark_published(*, batch: int, count: int, now: Any) -> None:
    """Batch ``batch`` published with its ``count`` records, and its run's counts moved."""
    jobs.execute_prepared(
        _mark_published(), {"batch": batch, "count": count, "now": now, "published": BatchStatus.PUBLISHED}
    )
