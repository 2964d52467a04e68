"""The engine's hot-path statements, written as SQL because they run for every job.

``jobs.engine`` owns every state change; these are the few of its statements that run
once per job or per batch, where the ORM's extra round trips, query compilation and
model instantiation cost more than the work itself (see docs/benchmarks.md). Each does
in one round trip what would otherwise take three to five, and keeps the engine's
guarantees: SKIP LOCKED claims, a lease token fencing every completion, the attempt
count, and a history row written by the same statement as the change it records.
"""

from __future__ import annotations

import functools
from functools import cache
from typing import Any

import psycopg
from django.db import connection

from jobs import conf
from jobs.models import Job

# psycopg prepares a statement only when its connection has a threshold; Django sets
# none (its own cursors bind client-side and never prepare). With this one, nothing is
# prepared unless asked to, as ``execute`` does.
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


def execute(statement: str, params: dict[str, Any], *, binary: bool = False) -> psycopg.Cursor:
    """Run one of these statements on Django's connection (in its current transaction),
    prepared once per connection.

    Django's cursors bind parameters client-side, so PostgreSQL plans every execution:
    1 to 3 ms for the claim on this kind of machine, several times its run time and most
    of an idle worker's pickup delay. A server-side-binding cursor on the same
    connection lets psycopg prepare the statement, and PostgreSQL reuse its generic
    plan. ``JOBS_PREPARED_STATEMENTS = False`` plans every time instead (for a
    transaction-pooling PgBouncer older than 1.21). Errors come out as Django's, and the
    connection's execute wrappers apply.

    ``binary`` asks for results in PostgreSQL's binary format, which psycopg loads
    several times faster than text (timestamps above all); then Django's text loaders
    do not apply and ``jsonb`` comes back decoded.
    """
    connection.validate_no_broken_transaction()
    connection.validate_thread_sharing()
    connection.ensure_connection()
    raw = connection.connection
    prepare = conf.prepared_statements()
    if prepare and raw.prepare_threshold is None:
        raw.prepare_threshold = _PREPARE_ONLY_WHEN_ASKED
    cursor = psycopg.Cursor(raw)

    def run(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
        with connection.wrap_database_errors:
            cursor.execute(sql, params, prepare=prepare, binary=binary)

    # The connection's execute wrappers see these statements as they see the ORM's (a
    # grouped job's savepoint is set by one, before its first statement).
    run_wrapped = functools.reduce(
        lambda inner, wrapper: functools.partial(wrapper, inner), connection.execute_wrappers, run
    )
    run_wrapped(statement, params, False, {"connection": connection, "cursor": cursor})
    return cursor


def one_row(cursor: psycopg.Cursor) -> tuple[Any, ...]:
    """The row of a statement that returns exactly one (an aggregate, a SELECT without
    FROM, an UPDATE … RETURNING of a CTE's single row)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("a one-row statement returned no row")
    return row


_INSERT_COLUMNS = """
    type, queue, priority, state, payload, progress_done, progress_message, attempts,
    max_attempts, run_after, locked_by, rescues, pipeline_id, parent_id, concurrency_key,
    key_scope, is_current, unique_key, pending_key, tenant_id, error_kind, last_error,
    created_at, created_by_id
"""
_INSERT_VALUES = """
    %(type)s, %(queue)s, %(priority)s, 'pending', p.payload, 0, '', 0,
    %(max_attempts)s, %(run_after)s, '', 0, COALESCE(%(pipeline)s::uuid, gen_random_uuid()),
    %(parent)s, %(concurrency_key)s, %(key_scope)s, false, p.unique_key, p.pending_key,
    %(tenant)s, '', '', %(now)s, %(created_by)s
"""


def _references() -> list[tuple[str, str, str]]:
    """Each row a job may name: (parameter, its SQL type, "table WHERE pk"), from the model."""
    quote = connection.ops.quote_name
    names = []
    for argument in ("parent", "tenant", "created_by"):
        target = Job._meta.get_field(argument).related_model._meta
        names.append(
            (
                argument,
                target.pk.rel_db_type(connection),
                f"{quote(target.db_table)} WHERE {quote(target.pk.column)}",
            )
        )
    return names


def _exists(argument: str, kind: str, where: str) -> str:
    # Typed as its column, so that the parameter's other use deduces the same type.
    return f"%({argument})s::{kind} IS NULL OR EXISTS (SELECT FROM {where} = %({argument})s::{kind})"


def _all_exist(checked: tuple[str, ...]) -> str:
    conditions = [f"({_exists(*reference)})" for reference in _references() if reference[0] in checked]
    return "WHERE " + "\n  AND ".join(conditions) if conditions else ""


@cache
def insert_jobs(
    *, keyed: bool, returning: str = "id", checked: tuple[str, ...] = (), document: bool = False
) -> str:
    """One job per element of ``%(payloads)s`` (a jsonb[]), in a single INSERT, in the
    payloads' order (ids ascending with it).

    ``document``: ``%(payloads)s`` is instead one JSON array of the payloads. PostgreSQL
    parses a large batch so about three times faster than the same payloads as a
    ``jsonb[]``, each of which is an escaped string inside an array literal.

    Nothing is inserted when the parent job, tenant or user it names does not exist (the
    caller then says which, from ``references()``): their foreign keys are deferred, so
    the violation would otherwise surface only at commit, far from the call. Only the
    references named in ``checked`` (those the caller gives) are looked up: a check that
    is not needed still costs its planning, a third of a small insert.

    With keys, ``ON CONFLICT DO NOTHING`` lets ``jobs_job_one_active_per_unique_key`` and
    ``jobs_job_one_pending_per_key`` skip the payloads whose key another job holds. Without
    them nothing can conflict (NULL keys are distinct, ids come from the sequence, no new
    row is ``is_current``), and a plain INSERT skips PostgreSQL's speculative insertion:
    about a quarter faster on large batches.
    """
    conflict = "ON CONFLICT DO NOTHING" if keyed else ""
    rows = """unnest(%(payloads)s::jsonb[], %(unique_keys)s::text[], %(pending_keys)s::text[])
     AS p(payload, unique_key, pending_key)"""
    if document:
        rows = """(SELECT d.payload, k.unique_key, k.pending_key
      FROM jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS d(payload, n)
      JOIN unnest(%(unique_keys)s::text[], %(pending_keys)s::text[]) WITH ORDINALITY
           AS k(unique_key, pending_key, n) USING (n)
      ORDER BY n) AS p"""
    return f"""
INSERT INTO jobs_job ({_INSERT_COLUMNS})
SELECT {_INSERT_VALUES}
FROM {rows}
{_all_exist(checked)}
{conflict}
RETURNING {returning}
"""


@cache
def references() -> str:
    """Whether the parent job, tenant and user of an insert exist (each true if none)."""
    return "SELECT " + ", ".join(_exists(*reference) for reference in _references())


@cache
def enqueue_one(*, keyed: bool, checked: tuple[str, ...] = ()) -> str:
    """Insert one job, signal the workers and return the whole row, in one round trip.

    ``pg_notify`` as a FROM item runs once; like any NOTIFY it is delivered only when the
    caller's transaction commits. (It also runs when a key conflict or a missing
    reference inserted nothing: a spurious wake-up finds no work, which is harmless.)
    It is written here rather than left to ``jobs.notify.notify``, which would cost a
    second round trip; ``%(channel)s`` is that module's ``CHANNEL``.
    """
    return f"""
WITH job AS ({insert_jobs(keyed=keyed, returning="*", checked=checked)})
SELECT job.* FROM job, pg_notify(%(channel)s, %(queue)s)
"""


@cache
def publish_event(*, checked: tuple[str, ...] = ()) -> str:
    """Record an event, one delivery job per subscriber and the deliveries linking them,
    and signal the workers of the jobs' queues, in one round trip; returns the event's id.

    The subscribers come as parallel arrays (``%(types)s``, ``%(queues)s``,
    ``%(max_attempts)s``, ``%(key_scopes)s``); each job's payload is the delivery's
    envelope, ``{"event_id", "event", "payload"}``. As in ``insert_jobs``, nothing at all
    is written when a referenced tenant or user named in ``checked`` does not exist.
    """
    kinds = {argument: kind for argument, kind, _ in _references()}
    tenant, user = f"%(tenant)s::{kinds['tenant']}", f"%(created_by)s::{kinds['created_by']}"
    return f"""
WITH event AS (
    INSERT INTO jobs_event (name, payload, tenant_id, pipeline_id, created_at, created_by_id)
    SELECT %(event)s::text, %(payload)s::jsonb, {tenant}, %(pipeline)s::uuid, %(now)s, {user}
    {_all_exist(checked)}
    RETURNING id
), job AS (
    INSERT INTO jobs_job ({_INSERT_COLUMNS})
    SELECT s.type, s.queue, 0, 'pending',
           jsonb_build_object('event_id', event.id, 'event', %(event)s::text,
                              'payload', %(payload)s::jsonb),
           0, '', 0, s.max_attempts, %(now)s, '', 0,
           COALESCE(%(pipeline)s::uuid, gen_random_uuid()), NULL, NULL, s.key_scope, false,
           NULL, NULL, {tenant}, '', '', %(now)s, {user}
    FROM event, unnest(%(types)s::text[], %(queues)s::text[], %(max_attempts)s::int[],
                       %(key_scopes)s::bigint[]) AS s(type, queue, max_attempts, key_scope)
    RETURNING id, type, queue
), delivery AS (
    INSERT INTO jobs_delivery (event_id, subscriber, job_id)
    SELECT event.id, job.type, job.id FROM event, job
)
SELECT event.id, (SELECT count(pg_notify(%(channel)s, woken.queue))
                  FROM (SELECT DISTINCT queue FROM job) AS woken)
FROM event
"""


# Every queue that has pending jobs, found by a "loose index scan" of jobs_job_claim_idx: one
# index probe per queue (then a NULL row, which ends the recursion), where SELECT DISTINCT
# would read every pending row. One CTE of a WITH RECURSIVE.
_PENDING_QUEUES_CTE = """
pending_queues(queue) AS (
    (SELECT queue FROM jobs_job WHERE state = 'pending' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs_job j
            WHERE j.state = 'pending' AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM pending_queues q WHERE q.queue IS NOT NULL
)
"""

# The served queues of a claim: the worker's own list, or every queue that has pending
# jobs.
_NAMED_QUEUES = "SELECT unnest(%(queues)s::text[]) AS queue"
_PENDING_QUEUES = """
    SELECT queue FROM pending_queues WHERE queue IS NOT NULL
"""


def _served(*, named_queues: bool) -> str:
    """The CTEs, for a WITH RECURSIVE, that end with ``served`` (one ``queue`` a row)."""
    if named_queues:
        return f"served AS ({_NAMED_QUEUES})"
    return f"{_PENDING_QUEUES_CTE.strip()},\nserved AS ({_PENDING_QUEUES})"


# The queues that have a due pending job (the reaper's wake-up round): each queue with
# pending jobs, then one probe per queue for a due one. About 1 ms at 100,000 pending
# jobs, where SELECT DISTINCT over the due rows takes 50 ms or more every round.
_DUE_QUEUES = f"""
WITH RECURSIVE {_PENDING_QUEUES_CTE.strip()}
SELECT queue FROM pending_queues
WHERE queue IS NOT NULL AND EXISTS (
    SELECT FROM jobs_job j WHERE j.state = 'pending' AND j.queue = pending_queues.queue
    AND j.run_after <= %(now)s)
LIMIT 50
"""


def due_queues() -> str:
    """Up to 50 queues that have a pending job due at ``%(now)s``, one a row."""
    return _DUE_QUEUES


# A due job a worker may run: the conditions of ``JobQuerySet.claimable()`` (which keyed
# claims and the "why" explanations use), written out again for the claim's statement.
# tests/jobs/test_claimable_agrees.py checks, on generated tables, that the two select
# the same jobs (through ``claimable_ids``); change both together. A keyed job qualifies
# only as the head of its key (no earlier due job of the key waits): jobs of one key run
# one at a time in the order they came, and a claim's batch holds one job per key, so a
# backlog of one key cannot fill a batch that other keys' jobs could use. The fan-in
# test sits behind ``waits``, as the parent's behind ``parent_id``: under an OR the
# planner keeps it a per-row index probe, run for fan-ins only, and never a join
# against the whole table, whatever the table's statistics say.
_CLAIMABLE = """
    j.state = 'pending' AND j.queue = served.queue AND j.run_after <= %(now)s
    AND j.type = ANY(%(types)s::text[])
    AND (j.parent_id IS NULL OR EXISTS (
          SELECT FROM jobs_job p WHERE p.id = j.parent_id AND p.state = 'succeeded'))
    AND (NOT j.waits OR NOT EXISTS (
          SELECT FROM jobs_dependency d JOIN jobs_job w ON w.id = d.prerequisite_id
          WHERE d.waiter_id = j.id AND w.state IN ('pending', 'running')))
    AND (j.concurrency_key IS NULL OR (
          NOT EXISTS (
            SELECT FROM jobs_job k
            WHERE k.concurrency_key = j.concurrency_key AND k.key_scope = j.key_scope
              AND k.state = 'running')
          AND NOT EXISTS (
            SELECT FROM jobs_job e
            WHERE e.concurrency_key = j.concurrency_key AND e.key_scope = j.key_scope
              AND e.state = 'pending' AND e.id < j.id AND e.run_after <= %(now)s
              AND e.type = ANY(%(types)s::text[])
              AND (e.parent_id IS NULL OR EXISTS (
                    SELECT FROM jobs_job ep WHERE ep.id = e.parent_id AND ep.state = 'succeeded'))
              AND (NOT e.waits OR NOT EXISTS (
                    SELECT FROM jobs_dependency ed JOIN jobs_job ew ON ew.id = ed.prerequisite_id
                    WHERE ed.waiter_id = e.id AND ew.state IN ('pending', 'running'))))))
"""


@cache
def claimable_ids(*, named_queues: bool) -> str:
    """The ids of every job ``_CLAIMABLE`` admits, given ``%(now)s``, ``%(types)s`` and (with
    ``named_queues``) ``%(queues)s``: the claim's condition and served queues alone, with
    no ranking, limit or locks, so that it can be compared with ``JobQuerySet.claimable()``
    (which serves every queue when given none, as the claim does)."""
    return f"""
WITH RECURSIVE {_served(named_queues=named_queues)}
SELECT j.id FROM served, jobs_job j
WHERE {_CLAIMABLE}
"""


# Per served queue, the best due jobs meeting ``condition``, read in the order of
# jobs_job_claim_idx and locked so that concurrent claimers pass over each other's rows.
_PER_QUEUE = """
    SELECT c.id, c.priority, c.concurrency_key, {tier} AS tier
    FROM served CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.concurrency_key
        FROM jobs_job j
        WHERE {claimable} AND {condition}
        ORDER BY j.priority DESC, j.id
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS c
"""

# Tenants whose jobs already run on their share of the live workers, not counting the
# claiming worker: ``%(share)s`` of them (at least one). A worker's whole batch counts
# once, as one worker.
_CROWDED = """
live(workers) AS (
    SELECT greatest(count(*), 1) FROM jobs_worker WHERE last_seen_at >= %(live_since)s
),
crowded(tenant_id) AS (
    SELECT r.tenant_id FROM jobs_job r
    WHERE r.state = 'running' AND r.tenant_id IS NOT NULL AND r.locked_by <> %(worker)s
    GROUP BY r.tenant_id
    HAVING count(DISTINCT r.locked_by) >= greatest(1, floor(%(share)s * (SELECT workers FROM live)))
),
"""


@cache
def claim(*, named_queues: bool, fair: bool = False, relaxed: bool = False, start_first: bool = False) -> str:
    """Take up to ``%(limit)s`` due jobs and start the unkeyed ones, in one statement.

    ``picked``: per served queue, the due pending jobs in priority order, read from
    ``jobs_job_claim_idx`` (queue, priority DESC, id WHERE pending) and locked with
    ``FOR UPDATE SKIP LOCKED`` so that concurrent claimers pass over each other's rows;
    then the best ``limit`` of them across queues. Walking the index per queue matters:
    ordering all pending rows by priority without a queue would sort the whole backlog
    on every claim (about 100 ms at 20,000 pending jobs, instead of well under 1 ms).
    A job qualifies if its type is registered, its parent (if any) succeeded, every
    job it waits on (``jobs_dependency``) has finished and no running job holds its
    concurrency key in its key scope (``_CLAIMABLE``).

    ``fair``: jobs of a tenant that already holds its share of the workers
    (``_CROWDED``) come after every other due job, whatever their priority. The claim
    still takes them when nothing else is due, so no worker idles while work waits;
    but one tenant's flood of slow jobs cannot keep another tenant's job waiting for
    more than the time one of them takes. Jobs without a tenant (the platform's) are
    never held back.

    ``started``: the unkeyed picks become running: lease stamped with this claim's token
    and the type's lease length (``%(leases)s`` is parallel to ``%(types)s``),
    ``started_at`` kept from the first attempt, a wake key cleared (whatever happens to
    the job next, it no longer sleeps on it). The attempt is not counted here but when
    the worker starts the handler (``start``): a claimed job that never started (its
    worker died first, or handed it back) has spent nothing. ``history``: their
    ``claimed`` rows, numbered with the attempt they are for. Keyed picks are returned
    unchanged (``claimed`` false); the caller hands their key over in a transaction of
    its own (``engine._claim_keyed``).

    ``relaxed``: committed without waiting for the disk, as ``start`` is and for the
    same reason: a claim lost with the server's crash leaves its jobs pending and
    unspent, and the first synchronous commit after it (a handler's, an outcome's)
    flushes it anyway. The flush would come first on every job's way from enqueue to
    handler.

    ``start_first``: the best-ranked unkeyed pick is also started (its attempt counted),
    for a worker that runs it the moment the claim returns: the claim is then the last
    round trip before that handler, as ``start`` is for the others, and an idle worker's
    way from a signal to a handler is one round trip shorter. Its ``claimed`` row is
    numbered with the attempt counted; ``counted`` says which job it is.
    """
    relax = "CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed" if relaxed else ""
    if fair:
        candidates = " UNION ALL ".join(
            [
                _PER_QUEUE.format(
                    tier=0,
                    claimable=_CLAIMABLE,
                    condition=("(j.tenant_id IS NULL OR j.tenant_id NOT IN (SELECT tenant_id FROM crowded))"),
                ),
                # The one-time EXISTS keeps this scan from running at all while no tenant is
                # crowded, which is nearly always.
                _PER_QUEUE.format(
                    tier=1,
                    claimable=_CLAIMABLE,
                    condition=(
                        "EXISTS (SELECT FROM crowded) AND j.tenant_id IN (SELECT tenant_id FROM crowded)"
                    ),
                ),
            ]
        )
        crowded = _CROWDED
    else:
        candidates = _PER_QUEUE.format(tier=0, claimable=_CLAIMABLE, condition="true")
        crowded = ""
    return f"""
WITH RECURSIVE {_served(named_queues=named_queues)},
{crowded}
candidates AS ({candidates}),
picked AS (
    SELECT id, priority, concurrency_key, tier FROM candidates
    ORDER BY tier, priority DESC, id
    LIMIT %(limit)s
),
first AS (
    SELECT id FROM picked WHERE concurrency_key IS NULL AND {"true" if start_first else "false"}
    ORDER BY tier, priority DESC, id
    LIMIT 1
),
started AS (
    UPDATE jobs_job j
    SET state = 'running', locked_by = %(worker)s,
        attempts = j.attempts + CASE WHEN j.id IN (SELECT id FROM first) THEN 1 ELSE 0 END,
        locked_at = %(now)s, heartbeat_at = %(now)s,
        lease_expires_at = %(now)s + make_interval(
            secs => (%(leases)s::float8[])[array_position(%(types)s::text[], j.type::text)]),
        lease_token = %(token)s, started_at = COALESCE(j.started_at, %(now)s),
        wake_key = NULL
    FROM picked
    WHERE j.id = picked.id AND picked.concurrency_key IS NULL
    RETURNING j.*, j.id IN (SELECT id FROM first) AS counted
),
history AS (
    INSERT INTO jobs_jobevent (job_id, at, kind, from_status, to_status, message, attempt,
                               worker)
    SELECT id, %(now)s, 'claimed', 'pending', 'running', '',
           attempts + CASE WHEN counted THEN 0 ELSE 1 END, %(worker)s
    FROM started
)
SELECT started.*, true AS claimed FROM started {relax}
UNION ALL
SELECT j.*, false, false FROM jobs_job j JOIN picked ON picked.id = j.id
WHERE picked.concurrency_key IS NOT NULL
"""


@cache
def wake() -> str:
    """Make the jobs snoozed on wake key ``%(key)s`` due at ``%(now)s``, clear their key,
    write their ``woken`` history rows (numbered with the attempt that snoozed, which
    runs again) and signal each of their queues; returns how many.
    Only those still asleep (pending, ``run_after`` ahead); read through
    ``jobs_job_wake_key_idx``."""
    return """
WITH woken AS (
    UPDATE jobs_job SET run_after = %(now)s, wake_key = NULL
    WHERE wake_key = %(key)s AND state = 'pending' AND run_after > %(now)s
    RETURNING id, queue, attempts
),
history AS (
    INSERT INTO jobs_jobevent (job_id, at, kind, from_status, to_status, message, attempt,
                               worker)
    SELECT id, %(now)s, 'woken', 'pending', 'pending', %(message)s, attempts + 1, ''
    FROM woken
)
SELECT (SELECT count(*) FROM woken),
       (SELECT count(pg_notify(%(channel)s, queue)) FROM (SELECT DISTINCT queue FROM woken) q)
"""


_COMPLETE = """
WITH done AS (
    UPDATE jobs_job j
    SET state = 'succeeded', result = s.result::jsonb, finished_at = s.at, error_kind = '',
        locked_by = '', locked_at = NULL, heartbeat_at = NULL, lease_expires_at = NULL,
        lease_token = NULL,
        progress_done = CASE WHEN s.progress THEN s.done ELSE j.progress_done END,
        progress_total = CASE WHEN s.progress THEN s.total ELSE j.progress_total END,
        progress_message = CASE WHEN s.progress THEN s.message ELSE j.progress_message END
    FROM unnest(%(ids)s::bigint[], %(results)s::text[], %(ats)s::timestamptz[],
                %(progress)s::bool[], %(done)s::bigint[], %(total)s::bigint[],
                %(message)s::text[]) AS s(id, result, at, progress, done, total, message)
    WHERE j.id = s.id AND j.state = 'running' AND j.lease_token = %(token)s
    RETURNING j.id, j.attempts, s.at
)
INSERT INTO jobs_jobevent (job_id, at, kind, from_status, to_status, message, attempt, worker)
SELECT id, at, 'succeeded', 'running', 'succeeded', '', attempts, %(worker)s FROM done
"""


def complete() -> str:
    """Record successes, fenced: each row (found by primary key) changes only while it
    is still running under this attempt's lease token, and the same statement writes
    its ``succeeded`` history row. One row per element of the parallel arrays (a single
    job, or a worker's group of jobs); the INSERT's row count says how many won."""
    return _COMPLETE


@cache
def start(*, relaxed: bool) -> str:
    """Count the attempt of each job of ``%(ids)s`` still running under ``%(token)s``, as
    its handler is about to run; returns their ids and attempt numbers. Run on its own
    and committed before the handler: a worker that dies in the handler has spent it.

    ``relaxed``: committed without waiting for the disk (its own transaction only): a worker's
    death does not lose an asynchronous commit, only the database server's crash can,
    and every later synchronous commit (the handler's, its outcome's) flushes it first.
    So the count is lost only with the server, along with the handler's unflushed
    work, and the job then runs again unspent: what a restart's jobs in flight are owed
    anyway. A flush per start measured a fifth of a small job's drain rate.
    """
    relax = "FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed" if relaxed else ""
    return f"""
UPDATE jobs_job
SET attempts = attempts + 1
{relax}
WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running' AND lease_token = %(token)s
RETURNING id, attempts
"""


@cache
def start_unless_locked(*, relaxed: bool) -> str:
    """``start`` for the jobs of ``%(ids)s`` whose rows no other transaction has locked;
    returns their ids and attempt numbers, then the ids of the others still running under
    ``%(token)s`` with a NULL attempt (busy: counted later, not waited for).

    A row of a job just claimed can stay locked for a moment by another worker's claim:
    a claim whose snapshot still saw it pending locks it on its way past, finds it no
    longer pending and keeps the lock until that claim commits. Waiting for it would idle
    this worker for the rest of that claim. A row taken away meanwhile (cancelled,
    rescued) is in neither list, once committed; one whose change has not committed yet
    shows as busy, and the next start finds it gone.
    """
    relax = "FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed" if relaxed else ""
    return f"""
WITH counted AS (
    UPDATE jobs_job
    SET attempts = attempts + 1
    {relax}
    WHERE id IN (
        SELECT id FROM jobs_job
        WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running' AND lease_token = %(token)s
        FOR NO KEY UPDATE SKIP LOCKED)
    RETURNING id, attempts
)
SELECT id, attempts FROM counted
UNION ALL
SELECT id, NULL FROM jobs_job
WHERE (SELECT count(*) FROM counted) < cardinality(%(ids)s::bigint[])
  AND id = ANY(%(ids)s::bigint[]) AND state = 'running' AND lease_token = %(token)s
  AND id NOT IN (SELECT id FROM counted)
"""


def rescue_expired() -> str:
    """Take back up to ``%(limit)s`` running jobs whose lease ended before ``%(now)s``,
    oldest lease first, in one statement: pending again (due now) while attempts remain,
    failed otherwise, each with its ``rescued`` history row and one signal per queue that
    has work again. Rows another transaction holds (a commit group still open) are
    passed over for a later round. Returns, per job: id, type, new state, the worker it
    is taken from. As ``engine.rescue`` does for one job: the attempt counted at the
    handler's start stays spent; a job claimed and never started has spent nothing.
    """
    return """
WITH expired AS (
    SELECT id, locked_by, lease_expires_at FROM jobs_job
    WHERE state = 'running' AND lease_expires_at < %(now)s
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE jobs_job j
    SET state = CASE WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'failed' END,
        run_after = CASE WHEN j.attempts < j.max_attempts THEN %(now)s ELSE j.run_after END,
        finished_at = CASE WHEN j.attempts < j.max_attempts THEN j.finished_at ELSE %(now)s END,
        rescues = j.rescues + 1,
        error_kind = %(error_kind)s,
        last_error = 'worker ' || e.locked_by || ' stopped heartbeating'
            || CASE WHEN j.attempts < j.max_attempts THEN ''
                    ELSE '; attempts exhausted (' || j.attempts || ')' END,
        locked_by = '', locked_at = NULL, heartbeat_at = NULL, lease_expires_at = NULL,
        lease_token = NULL
    FROM expired e
    WHERE j.id = e.id
    RETURNING j.id, j.type, j.state, j.queue, j.attempts, e.locked_by, e.lease_expires_at
),
history AS (
    INSERT INTO jobs_jobevent (job_id, at, kind, from_status, to_status, message, attempt,
                               worker)
    SELECT id, %(now)s, 'rescued', 'running', state,
           'rescued from ' || locked_by || ' (lease expired '
           || to_char(lease_expires_at AT TIME ZONE 'UTC', 'HH24:MI:SS') || ')',
           attempts, ''
    FROM rescued
),
signals AS (
    SELECT count(pg_notify(%(channel)s, queue))
    FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'pending') q
)
SELECT id, type, state, locked_by FROM rescued, signals
"""


def lock_running() -> str:
    """Lock the rows of ``%(ids)s`` that still run under ``%(token)s`` (by primary key),
    and return their ids. While this transaction holds them nobody can rescue, cancel or
    recover those jobs, so their completion later in it cannot be fenced out.

    The same statement bounds how long the transaction may sit idle between statements
    (``%(idle_ms)s``, for this transaction only, whether or not a row is left to lock): a
    worker frozen inside it (stopped,
    swapped out, its host hung) would otherwise hold the locks, and keep the reaper from
    its jobs, until TCP gave up on it. PostgreSQL ends such a session; the locks go with
    it, and the jobs are rescued once their leases lapse."""
    return """
SELECT set_config('idle_in_transaction_session_timeout', %(idle_ms)s::text, true),
       ARRAY(SELECT j.id FROM jobs_job j
             WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'running'
               AND j.lease_token = %(token)s
             ORDER BY j.id
             FOR UPDATE OF j)
"""


def heartbeat() -> str:
    """Push back the lease of each still-running job of ``%(ids)s`` held under ``%(token)s``
    (by primary key), by its type's lease length; rows locked elsewhere are skipped."""
    return """
UPDATE jobs_job j
SET heartbeat_at = %(now)s,
    lease_expires_at = %(now)s + make_interval(secs => COALESCE(
        (%(leases)s::float8[])[array_position(%(types)s::text[], j.type::text)], %(default)s))
WHERE j.id IN (
    SELECT id FROM jobs_job
    WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running' AND lease_token = %(token)s
    FOR UPDATE SKIP LOCKED
)
"""


@cache
def hold_lease(*, relaxed: bool = False) -> str:
    """Share-lock job ``%(id)s`` if it still runs under ``%(token)s``; returns a row if so.
    Until the caller's transaction ends, a rescue, cancel or recovery (each an UPDATE of
    the row) waits for it; one that came first makes this return nothing.

    ``relaxed`` also sets ``synchronous_commit`` off for the rest of the transaction (it
    is read at commit), saving the round trip a ``SET LOCAL`` of its own would cost."""
    relax = ", (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed" if relaxed else ""
    return (
        f"SELECT 1 FROM jobs_job{relax} WHERE id = %(id)s AND state = 'running' "
        "AND lease_token = %(token)s FOR SHARE OF jobs_job"
    )


def lock_prerequisites() -> str:
    """The jobs of ``%(after)s`` that exist and that a job of tenant ``%(tenant)s`` may
    wait on (its own tenant's; any job, for a platform job), locked against deletion
    until the caller's transaction ends."""
    return """
SELECT p.id FROM jobs_job p
WHERE p.id = ANY(%(after)s::bigint[])
  AND (%(tenant)s::bigint IS NULL OR p.tenant_id = %(tenant)s::bigint)
FOR KEY SHARE
"""


def add_prerequisites() -> str:
    """Make each job of ``%(waiters)s`` wait on each job of ``%(after)s``: the edges, and
    the flag that makes the claim look for them (``_CLAIMABLE``)."""
    return """
WITH edges AS (
    INSERT INTO jobs_dependency (waiter_id, prerequisite_id)
    SELECT w, p FROM unnest(%(waiters)s::bigint[]) AS w, unnest(%(after)s::bigint[]) AS p
)
UPDATE jobs_job SET waits = true WHERE id = ANY(%(waiters)s::bigint[])
"""


def busy_pipelines() -> str:
    """The pipelines among ``%(ids)s`` that have a pending or running job (an index probe
    of ``pipeline_id`` per id)."""
    return (
        "SELECT DISTINCT pipeline_id FROM jobs_job WHERE pipeline_id = ANY(%(ids)s::uuid[]) "
        "AND state IN ('pending', 'running')"
    )
