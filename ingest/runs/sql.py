"""The run pipeline's per-batch reads, written as SQL because every batch makes them.

Each delivery loads what it works on in one query: a run with its source, or a batch with
its run, source, tenant and hook executions. Through the ORM these are ``select_related``
joins over up to six models, and building the queryset, compiling it and having
PostgreSQL plan it again costs several times what running it does (about 2.5 ms against
0.3 ms for a batch with its hooks). Here each statement is written once, prepared on the
connection (``jobs.execute_prepared``), and its rows become the model instances the ORM would
have built, related objects attached. ``tests/ingest/test_sql.py`` holds them equal to the
ORM's.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Model

import jobs
from ingest.runs.models import Hook, HookExecution, IngestBatch, IngestRun, IngestSource
from tenancy.models import Tenant


def _columns(model: type[Model], alias: str) -> str:
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(field.column)}" for field in model._meta.concrete_fields)


def _instance(model: type[Model], row: tuple[Any, ...], start: int) -> tuple[Model | None, int]:
    """The ``model`` instance whose columns begin at ``row[start]`` (None if they are all
    NULL, as an outer join leaves them), and where the next model's begin."""
    fields = model._meta.concrete_fields
    values = row[start:start + len(fields)]
    end = start + len(fields)
    if all(value is None for value in values):
        return None, end
    return model.from_db(connection.alias, [field.attname for field in fields], values), end


def _tables() -> dict[str, str]:
    quote = connection.ops.quote_name
    return {model.__name__: quote(model._meta.db_table)
            for model in (Hook, HookExecution, IngestBatch, IngestRun, IngestSource, Tenant)}


@cache
def _run_for_fetch() -> str:
    t = _tables()
    return f"""
SELECT {_columns(IngestRun, "r")}, {_columns(IngestSource, "s")},
       EXISTS (SELECT FROM {t["IngestBatch"]} b
               WHERE b.run_id = r.id AND b.sequence = %(sequence)s),
       (SELECT b.session_out FROM {t["IngestBatch"]} b
        WHERE b.run_id = r.id AND b.sequence = %(sequence)s - 1)
FROM {t["IngestRun"]} r JOIN {t["IngestSource"]} s ON s.id = r.source_id
WHERE r.id = %(run)s AND r.tenant_id IS NOT DISTINCT FROM %(tenant)s::bigint
"""


def run_for_fetch(*, run: int, tenant: int | None, sequence: int) -> IngestRun | None:
    """Run ``run`` of ``tenant`` with its source, and ``batch_fetched`` (whether batch
    ``sequence`` exists) and ``previous_session`` (what batch ``sequence - 1`` left; None
    if there is no such batch) set on it."""
    row = jobs.execute_prepared(_run_for_fetch(), {"run": run, "tenant": tenant, "sequence": sequence},
                      binary=True).fetchone()
    if row is None:
        return None
    found, at = _instance(IngestRun, row, 0)
    found.source, at = _instance(IngestSource, row, at)
    found.batch_fetched, found.previous_session = row[at], row[at + 1]
    return found


@cache
def _batch_with_hooks() -> str:
    t = _tables()
    return f"""
SELECT {_columns(IngestBatch, "b")}, {_columns(IngestRun, "r")}, {_columns(IngestSource, "s")},
       {_columns(Tenant, "t")}, {_columns(HookExecution, "e")}, {_columns(Hook, "h")}
FROM {t["IngestBatch"]} b
JOIN {t["IngestRun"]} r ON r.id = b.run_id
JOIN {t["IngestSource"]} s ON s.id = r.source_id
JOIN {t["Tenant"]} t ON t.id = r.tenant_id
LEFT JOIN {t["HookExecution"]} e ON e.batch_id = b.id
LEFT JOIN {t["Hook"]} h ON h.id = e.hook_id
WHERE b.id = %(batch)s AND b.run_id = %(run)s AND r.tenant_id IS NOT DISTINCT FROM %(tenant)s::bigint
ORDER BY e.position
"""


def batch_with_hooks(*, batch: int, run: int, tenant: int | None
                     ) -> tuple[IngestBatch | None, list[HookExecution]]:
    """Batch ``batch`` of ``run`` (within ``tenant``) with its run, source and tenant, and
    its hook executions in order, each with its hook (None if the hook was removed) and
    sharing that one batch object."""
    rows = jobs.execute_prepared(_batch_with_hooks(), {"batch": batch, "run": run, "tenant": tenant},
                       binary=True).fetchall()
    if not rows:
        return None, []
    found, at = _instance(IngestBatch, rows[0], 0)
    found.run, at = _instance(IngestRun, rows[0], at)
    found.run.source, at = _instance(IngestSource, rows[0], at)
    found.run.tenant, at = _instance(Tenant, rows[0], at)
    executions = []
    for row in rows:
        execution, after = _instance(HookExecution, row, at)
        if execution is None:  # the batch has no hooks
            continue
        execution.hook, _ = _instance(Hook, row, after)
        execution.batch = found
        executions.append(execution)
    return found, executions


@cache
def _batch_to_publish() -> str:
    t = _tables()
    return f"""
SELECT {_columns(IngestBatch, "b")}, {_columns(IngestRun, "r")}, {_columns(IngestSource, "s")}
FROM {t["IngestBatch"]} b
JOIN {t["IngestRun"]} r ON r.id = b.run_id
JOIN {t["IngestSource"]} s ON s.id = r.source_id
WHERE b.id = %(batch)s AND b.run_id = %(run)s AND r.tenant_id IS NOT DISTINCT FROM %(tenant)s::bigint
FOR NO KEY UPDATE OF b, r
"""


def batch_to_publish(*, batch: int, run: int, tenant: int | None) -> IngestBatch | None:
    """Batch ``batch`` of ``run`` (within ``tenant``) with its run and source, the batch
    and the run locked until the caller's transaction ends."""
    row = jobs.execute_prepared(_batch_to_publish(), {"batch": batch, "run": run, "tenant": tenant},
                      binary=True).fetchone()
    if row is None:
        return None
    found, at = _instance(IngestBatch, row, 0)
    found.run, at = _instance(IngestRun, row, at)
    found.run.source, _ = _instance(IngestSource, row, at)
    return found
