"""Every change of a job's state happens here, and nowhere else.

Admin actions, API views, commands, the worker and the reaper all call these functions.
Each transition is a compare-and-set (``filter(pk=..., state=expected, ...).update()``)
whose row count says who won, and writes its history row in the same transaction. A
running job carries a lease token; finishing an attempt requires the current token, so
a worker that was presumed dead (and whose job was rescued, recovered or cancelled)
cannot commit its late result over the new state.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce

from jobs import arguments, clock, conf, errors, registry, sql
from jobs.backoff import DEFAULT_BACKOFF
from jobs.conf import WORKER_STALE_SECONDS
from jobs.enqueueing import ChildSpec, Enqueued, Prerequisite
from jobs.errors import IllegalTransition, InvalidArgument, LeaseLost, UnknownJobType
from jobs.models import Delivery, Job, JobEvent
from jobs.notify import CHANNEL, notify

logger = logging.getLogger(__name__)

State = Job.State
Kind = JobEvent.Kind

# What enqueue checks its arguments against.
QUEUE_LENGTH = arguments.max_length(Job, "queue")
KEY_LENGTH = arguments.max_length(Job, "unique_key")
REFERENCES = ("parent", "tenant", "created_by")  # the order of sql.references()'s columns
# How many jobs one job may wait on (``after``): a fan-in over the parts of a large load is a
# few hundred.
MAX_PREREQUISITES = 10_000

# Columns cleared whenever a job stops running.
NO_LEASE: dict[str, Any] = {
    "locked_by": "",
    "locked_at": None,
    "heartbeat_at": None,
    "lease_expires_at": None,
    "lease_token": None,
}


# --- enqueue ---------------------------------------------------------------------------


def _handler_or_raise(name: Any) -> registry.Handler:
    handler = registry.get(name) if isinstance(name, str) else None
    if handler is None:
        raise UnknownJobType(f"unknown job type {name!r}; registered: {', '.join(registry.names())}")
    return handler


def enqueue(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    run_after: datetime | None = None,
    priority: int = 0,
    queue: str | None = None,
    unique_key: str | None = None,
    pending_key: str | None = None,
    concurrency_key: str | None = None,
    pipeline: uuid.UUID | str | None = None,
    parent: Job | int | None = None,
    after: Sequence[Job | int] | None = None,
    tenant: Any = None,
    created_by: Any = None,
    max_attempts: int | None = None,
) -> Job:
    """Enqueue one job in the caller's transaction and return it.

    With ``unique_key``, enqueueing again while a job with that key is pending or
    running returns that job instead of a new one. With ``pending_key``, the same while
    the job with the key waits to start: once a worker has claimed it, the next call
    queues a new job (coalescing requests for work whose result a running job may not
    reflect any more). Partial unique indexes decide, so two concurrent callers cannot
    both insert; ``enqueue_once`` also says whether this call created the job. Both
    keys apply within the job's tenant: another tenant's job with the same key neither
    blocks nor answers this one. A concurrency key too, unless the handler declares
    ``global_keys``.

    Every argument is checked first (``jobs.arguments``): what cannot be stored exactly
    as given raises ``InvalidArgument`` naming it (``InvalidPayload`` for the payload,
    ``UnknownJobType`` for the name), and so does a ``parent``, ``tenant`` or
    ``created_by`` that does not exist; nothing is written then. ``None`` means the
    default: an empty payload, the handler's queue and max_attempts, now for
    ``run_after`` (which must be an aware datetime), a new pipeline.

    ``after`` makes a fan-in: the new job is not claimed before every job listed has
    finished, whatever its outcome (``jobs.models.Dependency``); its handler reads their
    outcomes with ``ctx.prerequisites()``. Listed jobs must exist and, for a tenant's
    job, be the tenant's (``InvalidArgument`` otherwise, with nothing written). A job
    that a key returns instead of a new one keeps its own prerequisites.
    """
    return _enqueue(
        name,
        payload,
        unique_key=unique_key,
        pending_key=pending_key,
        run_after=run_after,
        priority=priority,
        queue=queue,
        concurrency_key=concurrency_key,
        pipeline=pipeline,
        parent=parent,
        after=after,
        tenant=tenant,
        created_by=created_by,
        max_attempts=max_attempts,
    ).job


def enqueue_once(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    unique_key: str | None = None,
    pending_key: str | None = None,
    **options: Any,
) -> Enqueued:
    """``enqueue`` with a key, saying whether this call created the job.

    ``Enqueued(job, created=True)``: this call inserted ``job``. ``created=False``: the
    job already holding the key (unfinished, for ``unique_key``; waiting to start, for
    ``pending_key``) is returned and nothing was written. The database decides, under
    concurrency too. ``options`` are the other arguments of ``enqueue``.
    """
    if unique_key is None and pending_key is None:
        raise InvalidArgument(
            "pending_key", "pending_key or unique_key is needed: without a key every call creates a job"
        )
    return _enqueue(name, payload, unique_key=unique_key, pending_key=pending_key, **options)


def _enqueue(name: str, payload: Any, *, unique_key: Any, pending_key: Any, **options: Any) -> Enqueued:
    params = _prepare(name, [{} if payload is None else payload], [unique_key], [pending_key], options)
    statement = sql.enqueue_one(
        keyed=unique_key is not None or pending_key is not None, checked=_given_references(params)
    )
    with _waiting(params) as wait:
        for _ in range(5):
            # One round trip: the INSERT, its NOTIFY and the new row (no second SELECT).
            inserted = _jobs_from(sql.execute(statement, params, binary=True))
            if inserted:
                wait([inserted[0][0].pk])
                return Enqueued(inserted[0][0], created=True)
            _check_references(params)
            holder = _key_holder(params)
            if holder is not None:
                return Enqueued(holder, created=False)
            # The holder finished (or started) between our insert and our read: insert again.
    raise IntegrityError(
        f"could not enqueue {name!r} with unique key {unique_key!r} and pending key {pending_key!r}"
    )


def enqueue_many(
    name: str,
    payloads: Sequence[dict[str, Any]],
    *,
    unique_keys: Sequence[str | None] | None = None,
    pending_keys: Sequence[str | None] | None = None,
    run_after: datetime | None = None,
    priority: int = 0,
    queue: str | None = None,
    concurrency_key: str | None = None,
    pipeline: uuid.UUID | str | None = None,
    parent: Job | int | None = None,
    after: Sequence[Job | int] | None = None,
    tenant: Any = None,
    created_by: Any = None,
    max_attempts: int | None = None,
) -> list[int]:
    """Insert one job per payload in a single statement; return the new ids, in the
    order of their payloads.

    Runs in the caller's transaction; workers are woken when it commits (NOTIFY is
    transactional). ``unique_keys`` and ``pending_keys`` run parallel to ``payloads``;
    a payload whose key another job holds (as in ``enqueue``) is skipped, so the result
    can be shorter than ``payloads``. Without ``pipeline`` each job starts its own
    pipeline. Arguments are checked as by ``enqueue``; one bad payload refuses the batch.
    With ``after``, every new job waits on the jobs listed.
    """
    options = dict(
        run_after=run_after,
        priority=priority,
        queue=queue,
        concurrency_key=concurrency_key,
        pipeline=pipeline,
        parent=parent,
        after=after,
        tenant=tenant,
        created_by=created_by,
        max_attempts=max_attempts,
    )
    if isinstance(payloads, Mapping | str | bytes):
        raise InvalidArgument(
            "payloads", f"payloads must be a sequence of payloads, got {arguments.describe(payloads)}"
        )
    payloads = list(payloads)
    params = _prepare(
        name,
        payloads,
        _parallel("unique_keys", unique_keys, len(payloads)),
        _parallel("pending_keys", pending_keys, len(payloads)),
        options,
        many=True,
    )
    if not payloads:
        return []
    keyed = unique_keys is not None or pending_keys is not None
    statement = sql.insert_jobs(keyed=keyed, checked=_given_references(params), document=True)
    params["payloads"] = f"[{','.join(params['payloads'])}]"
    with _waiting(params) as wait, connection.cursor() as cursor:
        cursor.execute(statement, params)
        ids = [row[0] for row in cursor.fetchall()]
        if ids:
            wait(ids)
            notify(params["queue"])
        else:
            _check_references(params)
    return ids


def check_enqueue(name: str, payload: dict[str, Any] | None = None, **options: Any) -> None:
    """Check the arguments of an ``enqueue`` without writing anything (all but whether
    the rows they name exist). ``ctx.chain`` does, so that a bad child fails the handler
    that asks for it rather than its success later."""
    options = {**options}
    unique_key, pending_key = options.pop("unique_key", None), options.pop("pending_key", None)
    _prepare(name, [{} if payload is None else payload], [unique_key], [pending_key], options)


def check_references(
    *, parent: int | None = None, tenant: int | None = None, created_by: int | None = None
) -> None:
    """Raise ``InvalidArgument`` naming the first of these rows that does not exist."""
    _check_references({"parent": parent, "tenant": tenant, "created_by": created_by})


def _parallel(argument: str, keys: Iterable[Any] | None, count: int) -> list[Any]:
    if keys is None:
        return [None] * count
    keys = [] if isinstance(keys, str | bytes | Mapping) else list(keys)
    if len(keys) != count:
        raise InvalidArgument(argument, f"{argument} must be a list matching payloads one to one")
    return keys


def _prepare(
    name: str,
    payloads: list[Any],
    unique_keys: list[Any],
    pending_keys: list[Any],
    options: dict[str, Any],
    *,
    many: bool = False,
) -> dict[str, Any]:
    """The INSERT's parameters from checked arguments (``jobs.arguments``)."""
    handler = _handler_or_raise(name)
    if many:
        encoded = [arguments.payload(p, f"payloads[{i}]") for i, p in enumerate(payloads)]
    else:
        encoded = [arguments.payload(payloads[0])]
    return _insert_params(
        handler,
        encoded,
        [arguments.key("unique_key", k, KEY_LENGTH) for k in unique_keys],
        [arguments.key("pending_key", k, KEY_LENGTH) for k in pending_keys],
        **options,
    )


def _insert_params(
    handler: registry.Handler,
    encoded: list[str],
    unique_keys: list[str | None],
    pending_keys: list[str | None],
    *,
    run_after: Any = None,
    priority: Any = 0,
    queue: Any = None,
    concurrency_key: Any = None,
    pipeline: Any = None,
    parent: Any = None,
    after: Any = None,
    tenant: Any = None,
    created_by: Any = None,
    max_attempts: Any = None,
) -> dict[str, Any]:
    now = clock.now()
    tenant_id = arguments.reference("tenant", tenant, _related("tenant"))
    return {
        "type": handler.name,
        "queue": handler.queue
        if queue is None
        else arguments.text("queue", queue, QUEUE_LENGTH, none_means="the handler's queue"),
        "priority": arguments.priority(priority),
        "max_attempts": handler.max_attempts
        if max_attempts is None
        else arguments.max_attempts(max_attempts),
        "run_after": now if run_after is None else arguments.run_after(run_after),
        "pipeline": arguments.pipeline(pipeline),
        "parent": arguments.reference("parent", parent, Job),
        "after": arguments.references("after", after, Job, limit=MAX_PREREQUISITES),
        "concurrency_key": arguments.key("concurrency_key", concurrency_key, KEY_LENGTH),
        "key_scope": 0 if handler.global_keys or tenant_id is None else tenant_id,
        "tenant": tenant_id,
        "now": now,
        "created_by": arguments.reference(
            "created_by", created_by, _related("created_by"), anonymous_is_none=True
        ),
        "payloads": encoded,
        "unique_keys": unique_keys,
        "pending_keys": pending_keys,
        "channel": CHANNEL,
    }


@contextlib.contextmanager
def _waiting(params: dict[str, Any]) -> Iterator[Callable[[list[int]], object]]:
    """For an insert with ``after``: check and lock the prerequisites first (refusing the
    call before anything is written), and give the caller the function that makes the
    jobs it inserted wait on them, all in one transaction, so that no worker can see a
    waiter before its edges. Without ``after``, nothing and no transaction."""
    after = params["after"]
    if not after:
        yield lambda waiters: None
        return
    with transaction.atomic():
        found = {row[0] for row in sql.execute(sql.lock_prerequisites(), params).fetchall()}
        missing = [pk for pk in after if pk not in found]
        if missing:
            whose = "" if params["tenant"] is None else " of this tenant"
            raise InvalidArgument("after", f"after names job {missing[0]}, which is no job{whose}")
        yield lambda waiters: sql.execute(sql.add_prerequisites(), {"waiters": waiters, "after": after})


def _related(field: str) -> Any:
    return Job._meta.get_field(field).related_model


def _given_references(params: dict[str, Any]) -> tuple[str, ...]:
    """The references an insert names, whose rows it must check."""
    return tuple(argument for argument in REFERENCES if params[argument] is not None)


def _check_references(params: dict[str, Any]) -> None:
    """After an insert that wrote nothing: say which named row is missing, if one is."""
    named = {argument: params[argument] for argument in REFERENCES}
    if all(pk is None for pk in named.values()):
        return
    exists = sql.one_row(sql.execute(sql.references(), named))
    for (argument, pk), found in zip(named.items(), exists, strict=True):
        if not found:
            raise InvalidArgument(argument, f"{argument} {pk} does not exist")


def _key_holder(params: dict[str, Any]) -> Job | None:
    """The job holding the key an insert conflicted on (None: it left meanwhile)."""
    unique_key, pending_key = params["unique_keys"][0], params["pending_keys"][0]
    jobs = Job.objects.filter(tenant_id=params["tenant"])
    holder = None
    if unique_key is not None:
        holder = jobs.unfinished().filter(unique_key=unique_key).first()
    if holder is None and pending_key is not None:
        holder = jobs.waiting_to_start().filter(pending_key=pending_key).first()
    return holder


# --- claim -------------------------------------------------------------------------------


@dataclass
class Claim:
    """A batch of jobs this worker now holds, all fenced by one lease token."""

    token: uuid.UUID
    worker: str
    jobs: list[Job]
    # The job whose attempt the claim counted (``start_first``), first in ``jobs``.
    started: int | None = None


def claim(
    worker: str,
    *,
    limit: int,
    queues: Sequence[str] = (),
    types: Sequence[str] | None = None,
    start_first: bool = False,
) -> Claim:
    """Take up to ``limit`` due jobs, mark them running and stamp their lease. Their
    attempts are counted only when their handlers start (``start``).

    ``start_first``: the claim also counts the attempt of the best-ranked job it takes
    (not one with a concurrency key), which comes first in the batch and
    ``Claim.started`` names: for a worker that starts that handler as soon as the claim
    returns, so that the claim is the last round trip before it, as ``start`` is
    before the others.

    Unkeyed jobs are claimed by one statement (``jobs.sql.claim``): ``SELECT … FOR UPDATE
    SKIP LOCKED`` (concurrent claimers skip each other's rows instead of waiting), the
    update of state and lease, and the history rows, all or nothing. A job
    with a concurrency key also becomes ``is_current`` for its key, in a transaction of
    its own; a concurrent claimer of the same key trips ``jobs_job_one_current_per_key`` and
    leaves the job alone. A tenant holding its share of the workers (``TENANT_SHARE``)
    has its jobs taken only after every other tenant's due ones.
    """
    params = claim_params(worker, limit=limit, queues=queues, types=types)
    now, token, type_names = params["now"], params["token"], params["types"]
    # Inside a caller's transaction (a test's), relaxing would relax the caller's commit.
    statement = sql.claim(
        named_queues=bool(queues),
        fair=params["share"] < 1,
        relaxed=not connection.in_atomic_block,
        start_first=start_first,
    )
    rows = _jobs_from(sql.execute(statement, params, binary=True))
    jobs = [job for job, row in rows if row["claimed"]]
    started = next((job.pk for job, row in rows if row["counted"]), None)
    keyed = [job.pk for job, row in rows if not row["claimed"]]
    if keyed:
        jobs += _claim_keyed_jobs(keyed, token, worker, now, type_names, queues)
    # RETURNING has no order; the started job goes first, whatever its rank among keyed ones.
    jobs.sort(key=lambda job: (job.pk != started, -job.priority, job.pk))
    return Claim(token, worker, jobs, started)


def claim_params(
    worker: str, *, limit: int, queues: Sequence[str] = (), types: Sequence[str] | None = None
) -> dict[str, Any]:
    """The parameters of ``jobs.sql.claim``: now, a new lease token, the served types and
    their lease lengths, the tenants' share."""
    now = clock.now()
    type_names = list(types) if types is not None else registry.local_names()
    return {
        "now": now,
        "types": type_names,
        "leases": [float(_lease_for(t)) for t in type_names],
        "queues": list(queues),
        "limit": limit,
        "worker": worker,
        "token": uuid.uuid4(),
        "share": conf.tenant_share(),
        "live_since": now - timedelta(seconds=WORKER_STALE_SECONDS),
    }


def _jobs_from(cursor: Any) -> list[tuple[Job, dict[str, Any]]]:
    """Job instances from binary-format rows of ``jobs_job.*``, each with its row as a
    dict (for extra columns). Columns are matched by name; binary ``jsonb`` arrives
    decoded, so the instances are what the ORM would build."""
    fields = Job._meta.concrete_fields
    attnames = [f.attname for f in fields]
    names = [column.name for column in cursor.description]
    jobs = []
    for row in cursor.fetchall():
        values = dict(zip(names, row, strict=True))
        job = Job.from_db(connection.alias, attnames, [values[f.column] for f in fields])
        jobs.append((job, values))
    return jobs


def _claim_keyed_jobs(
    ids: list[int], token: uuid.UUID, worker: str, now: datetime, type_names: list[str], queues: Sequence[str]
) -> list[Job]:
    """Claim the keyed jobs a claim picked: lock them again (the claim statement has
    committed), re-check that their key is free, and hand each key over."""
    with transaction.atomic():
        picked = list(
            Job.objects.claimable(now, type_names, list(queues))
            .filter(pk__in=ids)
            .order_by("-priority", "id")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("id", "type", "concurrency_key", "key_scope")
        )
        keyed: dict[tuple[int, str], int] = {}
        for pk, _, key, scope in picked:
            if key is not None:  # all of them: the claim leaves only keyed jobs to this
                keyed.setdefault((scope, key), pk)  # at most one job per key in one batch
        won = [
            pk
            for (scope, key), pk in keyed.items()
            if _claim_keyed(pk, key, scope, picked, token, worker, now)
        ]
        jobs = list(Job.objects.filter(pk__in=won))
        JobEvent.objects.bulk_create(
            JobEvent(
                job_id=job.pk,
                at=now,
                kind=Kind.CLAIMED,
                from_status=State.PENDING,
                to_status=State.RUNNING,
                attempt=job.attempts + 1,
                worker=worker,
            )
            for job in jobs
        )
    return jobs


def _lease_for(type_name: str) -> float:
    handler = registry.get(type_name)
    return handler.lease if handler and handler.lease else conf.lease_seconds()


def _start(
    ids: list[int],
    picked: list[tuple[int, str, str | None, int]],
    token: uuid.UUID,
    worker: str,
    now: datetime,
) -> int:
    """Mark locked pending rows running, one UPDATE per distinct lease length."""
    by_lease: dict[float, list[int]] = {}
    types = {pk: type_name for pk, type_name, _, _ in picked}
    for pk in ids:
        by_lease.setdefault(_lease_for(types[pk]), []).append(pk)
    count = 0
    for lease, pks in by_lease.items():
        count += Job.objects.filter(pk__in=pks).update(
            state=State.RUNNING,
            locked_by=worker,
            locked_at=now,
            heartbeat_at=now,
            lease_expires_at=now + timedelta(seconds=lease),
            lease_token=token,
            started_at=Coalesce(F("started_at"), now),
            wake_key=None,
        )
    return count


def _claim_keyed(
    pk: int,
    key: str,
    scope: int,
    picked: list[tuple[int, str, str | None, int]],
    token: uuid.UUID,
    worker: str,
    now: datetime,
) -> bool:
    try:
        with transaction.atomic():
            # Hand the key over: the previous current job (finished, never running) steps
            # down, this one steps up. Both writes or neither.
            Job.objects.filter(concurrency_key=key, key_scope=scope, is_current=True).exclude(
                state=State.RUNNING
            ).exclude(pk=pk).update(is_current=False)
            Job.objects.filter(pk=pk).update(is_current=True)
            _start([pk], picked, token, worker, now)
        return True
    except IntegrityError:
        logger.info("concurrency key %s is held by another claimer", key, extra={"job": pk})
        return False


def start(jobs: Sequence[Job], token: uuid.UUID) -> set[int]:
    """Count the attempt of ``jobs`` whose handlers are about to run; returns the ids of
    those still running under ``token`` (the others were cancelled, recovered or
    rescued since the claim, and must not run). Each job's ``attempts`` is updated.

    The worker calls it outside any transaction, so that it commits before the handlers
    run: an attempt is spent when its handler starts, so a worker that dies inside a handler has
    spent it, while jobs it had claimed and not started go back unspent.
    """
    if not jobs:
        return set()
    # Inside a caller's transaction (a test's), relaxing would relax the caller's commit.
    statement = sql.start(relaxed=not connection.in_atomic_block)
    rows = sql.execute(statement, {"ids": [job.pk for job in jobs], "token": token}).fetchall()
    attempts: dict[int, int] = dict(rows)
    for job in jobs:
        if job.pk in attempts:
            job.attempts = attempts[job.pk]
    return set(attempts)


def start_unless_locked(jobs: Sequence[Job], token: uuid.UUID) -> tuple[set[int], set[int]]:
    """``start`` for those of ``jobs`` whose rows no other session holds locked; returns
    the ids counted and the ids left busy (still running under ``token``, to be started
    later). The others were taken away since the claim and must not run."""
    if not jobs:
        return set(), set()
    statement = sql.start_unless_locked(relaxed=not connection.in_atomic_block)
    rows = sql.execute(statement, {"ids": [job.pk for job in jobs], "token": token}).fetchall()
    attempts = {pk: attempt for pk, attempt in rows if attempt is not None}
    for job in jobs:
        if job.pk in attempts:
            job.attempts = attempts[job.pk]
    return set(attempts), {pk for pk, attempt in rows if attempt is None}


def unstart(job_ids: Iterable[int], token: uuid.UUID) -> int:
    """Give back the attempts ``start`` counted for jobs whose handlers did not run after
    all (they stay claimed, to be started again later); returns how many."""
    ids = list(job_ids)
    if not ids:
        return 0
    return Job.objects.filter(pk__in=ids, state=State.RUNNING, lease_token=token).update(
        attempts=F("attempts") - 1
    )


# --- while a handler runs --------------------------------------------------------------


def hold_lease(job: Job, *, relaxed: bool = False) -> None:
    """Raise ``LeaseLost`` unless ``job`` still runs under the lease it was claimed with;
    otherwise keep it so until the caller's transaction ends (``ctx.hold_lease``).
    ``relaxed``: that transaction's commit need not wait for the disk (``ctx.batch``)."""
    row = None
    if job.lease_token is not None:
        row = sql.execute(
            sql.hold_lease(relaxed=relaxed), {"id": job.pk, "token": job.lease_token}
        ).fetchone()
    if row is None:
        raise LeaseLost(f"job {job.pk}: lease {job.lease_token} is no longer current; its write is refused")


def prerequisites(job: Job) -> list[Prerequisite]:
    """The jobs ``job`` waits on (``enqueue(..., after=...)``), by id, with their outcomes."""
    rows = (
        Job.objects.filter(waiter_edges__waiter=job.pk)
        .order_by("id")
        .values_list("id", "type", "state", "payload", "result")
    )
    return [Prerequisite(*row) for row in rows]


# --- outcomes of an attempt ------------------------------------------------------------


def _fenced(job: Job, token: uuid.UUID) -> Any:
    return Job.objects.filter(pk=job.pk, state=State.RUNNING, lease_token=token)


def _event(
    job: Job | int,
    kind: str,
    from_status: str,
    to_status: str,
    *,
    message: str = "",
    attempt: int = 0,
    worker: str = "",
    actor: Any = None,
    via: str = "",
    at: datetime | None = None,
    done: int | None = None,
    total: int | None = None,
) -> JobEvent:
    return JobEvent.objects.create(
        job_id=getattr(job, "pk", job),
        at=at or clock.now(),
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        message=message[:10_000],
        attempt=attempt,
        worker=worker,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        via=via,
        progress_done=done,
        progress_total=total,
    )


def _lease_lost(job: Job, token: uuid.UUID, worker: str, what: str) -> LeaseLost:
    logger.warning(
        "refused late %s of job %s: lease %s is no longer current",
        what,
        job.pk,
        token,
        extra={"job": job.pk, "worker": worker},
    )
    return LeaseLost(f"job {job.pk}: lease {token} is no longer current; {what} refused")


def complete(
    job: Job,
    token: uuid.UUID,
    *,
    result: Any = None,
    worker: str = "",
    children: Iterable[ChildSpec] = (),
    progress: tuple[int, int | None, str] | None = None,
) -> None:
    """Record success and enqueue chained children, atomically; raise LeaseLost if fenced."""
    children = list(children)
    with transaction.atomic() if children else contextlib.nullcontext():
        # Without children the one statement is atomic by itself: no savepoint needed.
        if not _record_successes([Success(job, result, progress)], token, worker):
            raise _lease_lost(job, token, worker, "success")
        enqueue_children(job, children)


@dataclass
class Success:
    """A finished attempt whose success is recorded later in the same transaction."""

    job: Job
    result: Any = None
    progress: tuple[int, int | None, str] | None = None
    at: datetime = field(default_factory=clock.now)  # its finish time, not the commit's


def enqueue_children(job: Job, children: Iterable[ChildSpec]) -> None:
    """Enqueue ``ctx.chain`` children in the parent's pipeline (the caller's transaction
    must be the one that records the parent's success)."""
    for child in children:
        options = {"tenant": job.tenant_id, "pipeline": job.pipeline_id, "parent": job.pk, **child.options}
        enqueue(child.name, child.payload, **options)


def lock_running(jobs: Sequence[Job], token: uuid.UUID) -> set[int]:
    """Lock the rows of those ``jobs`` that still run under ``token``, until the caller's
    transaction ends; returns their ids. Their successes can then be recorded together
    by ``complete_locked`` at the end of the transaction, with no fence left to lose.

    The transaction may then sit idle between statements for at most the shortest lease
    of the jobs: a group must finish within its leases anyway (the heartbeat cannot renew
    rows it holds locked), and a worker frozen inside it must not hold them longer."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("lock_running needs a transaction to hold the locks")
    cursor = sql.execute(
        sql.lock_running(),
        {"ids": [job.pk for job in jobs], "token": token, "idle_ms": int(group_idle_bound(jobs) * 1000)},
    )
    return set(sql.one_row(cursor)[1])


def group_idle_bound(jobs: Sequence[Job]) -> float:
    """Seconds a group's transaction may sit idle: the shortest lease of its jobs."""
    return min(_lease_for(job.type) for job in jobs) if jobs else conf.lease_seconds()


def complete_locked(successes: Sequence[Success], token: uuid.UUID, *, worker: str = "") -> None:
    """Record the successes of jobs locked by ``lock_running`` in this transaction, in one
    statement (their children were enqueued as each finished, by ``enqueue_children``)."""
    if successes and _record_successes(successes, token, worker) != len(successes):
        # The locks make this impossible; roll the whole transaction back rather than
        # commit a handler's writes without its job's success.
        raise LeaseLost(f"a locked job of lease {token} was fenced out")


def _record_successes(successes: Sequence[Success], token: uuid.UUID, worker: str) -> int:
    progress = [s.progress if s.progress is not None else (0, None, "") for s in successes]
    params = {
        "ids": [s.job.pk for s in successes],
        # As QuerySet.update() stores a JSONField: None is SQL NULL, anything else JSON.
        "results": [None if s.result is None else json.dumps(s.result) for s in successes],
        "ats": [s.at for s in successes],
        "progress": [s.progress is not None for s in successes],
        "done": [p[0] for p in progress],
        "total": [p[1] for p in progress],
        "message": [p[2][:300] for p in progress],
        "token": token,
        "worker": worker,
    }
    return sql.execute(sql.complete(), params).rowcount


def record_refusal(job: Job, what: str, *, worker: str = "") -> None:
    """History row for a late result that was refused (written after its rollback)."""
    with transaction.atomic():
        state = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first() or ""
        _event(
            job,
            Kind.LEASE_LOST,
            State.RUNNING,
            state,
            attempt=job.attempts,
            worker=worker,
            message=f"late {what} of attempt {job.attempts} refused: lease no longer current",
        )


def fail(
    job: Job,
    token: uuid.UUID,
    error: str,
    *,
    permanent: bool = False,
    worker: str = "",
    error_kind: str | None = None,
) -> str:
    """Record a failed attempt: retry after the handler's backoff, or fail for good.

    ``error_kind`` overrides the kind recorded (transient or permanent by default).
    Returns the job's new state. Raises LeaseLost if the attempt was fenced out.
    """
    now = clock.now()
    handler = registry.get(job.type)
    retry = not permanent and job.attempts < job.max_attempts
    with transaction.atomic():
        if retry:
            backoff = handler.backoff if handler else DEFAULT_BACKOFF
            run_after = now + backoff.delay(max(job.attempts, 1))
            updated = _fenced(job, token).update(
                state=State.PENDING,
                run_after=run_after,
                error_kind=error_kind or Job.ErrorKind.TRANSIENT,
                last_error=error,
                **NO_LEASE,
            )
            kind, to_state = Kind.RETRY_SCHEDULED, State.PENDING
            message = f"attempt {job.attempts} failed, retry at {run_after:%Y-%m-%d %H:%M:%S}: {error}"
        else:
            kind_of = error_kind or (Job.ErrorKind.PERMANENT if permanent else Job.ErrorKind.TRANSIENT)
            updated = _fenced(job, token).update(
                state=State.FAILED, finished_at=now, error_kind=kind_of, last_error=error, **NO_LEASE
            )
            kind, to_state = Kind.FAILED, State.FAILED
            message = error if permanent else f"attempts exhausted ({job.attempts}): {error}"
        if not updated:
            raise _lease_lost(job, token, worker, "failure")
        _event(
            job, kind, State.RUNNING, to_state, message=message, attempt=job.attempts, worker=worker, at=now
        )
        if to_state == State.FAILED:
            cancel_dependants(job.pk, now)
    return to_state


def snooze(
    job: Job,
    token: uuid.UUID,
    seconds: float,
    *,
    message: str = "",
    worker: str = "",
    wake_on: str | None = None,
) -> None:
    """Put the job back to sleep for ``seconds``, giving its attempt back. With
    ``wake_on``, ``wake`` of that key ends the sleep early; without, no earlier key
    does."""
    now = clock.now()
    with transaction.atomic():
        run_after = now + timedelta(seconds=seconds)
        if not _fenced(job, token).update(
            state=State.PENDING, run_after=run_after, attempts=F("attempts") - 1, wake_key=wake_on, **NO_LEASE
        ):
            raise _lease_lost(job, token, worker, "snooze")
        message = message or f"until {run_after:%H:%M:%S}"
        if wake_on is not None:
            message += f" (or until {wake_on!r} is woken)"
        _event(
            job,
            Kind.SNOOZED,
            State.RUNNING,
            State.PENDING,
            attempt=job.attempts,
            worker=worker,
            at=now,
            message=message,
        )


def wake(key: str) -> int:
    """Make every job snoozed with ``wake_on=key`` due now; returns how many.

    For the job that changed the condition the snoozed jobs wait for (a probe that
    closed a circuit breaker): they run now rather than a whole snooze later. Only
    pending jobs still asleep are touched: one running, finished, or already due is
    left alone, and one snoozed again with the key after this is woken by the next
    wake. Each gets a ``woken`` history row, and the workers serving its queue a NOTIFY.
    Runs in the caller's transaction, and takes effect when it commits (NOTIFY is
    delivered on commit). A key nobody waits on costs one probe of an almost empty
    index (``jobs_job_wake_key_idx``).
    """
    params = {
        "key": errors.wake_key(key, "key"),
        "now": clock.now(),
        "channel": CHANNEL,
        "message": f"woken by {key!r}",
    }
    return sql.one_row(sql.execute(sql.wake(), params))[0]


def release(
    jobs: Sequence[Job],
    token: uuid.UUID,
    *,
    worker: str = "",
    started: Iterable[int] = (),
    message: str = "handed back unstarted",
) -> int:
    """Hand back jobs whose handlers did not run (batch ran long, shutdown, or a job of
    the batch is about to wait on something outside). Their attempts were never
    counted, except for those in ``started`` (counted, then not run after all): theirs
    is given back. ``message`` says why in their history."""
    if not jobs:
        return 0
    now = clock.now()
    counted = set(started)
    with transaction.atomic():
        # Locked as they are read: a reaper, an operator or another worker must not take a
        # job between this read and the updates, or the update would take it from them.
        ids = [job.pk for job in jobs]
        held = Job.objects.filter(pk__in=ids, state=State.RUNNING, lease_token=token)
        released = list(held.select_for_update().order_by("pk").values_list("pk", flat=True))
        held.filter(pk__in=[pk for pk in released if pk not in counted]).update(
            state=State.PENDING, **NO_LEASE
        )
        held.filter(pk__in=[pk for pk in released if pk in counted]).update(
            state=State.PENDING, attempts=F("attempts") - 1, **NO_LEASE
        )
        JobEvent.objects.bulk_create(
            JobEvent(
                job_id=pk,
                at=now,
                kind=Kind.RELEASED,
                from_status=State.RUNNING,
                to_status=State.PENDING,
                worker=worker,
                message=message,
            )
            for pk in released
        )
        if released:
            notify()
    return len(released)


def heartbeat(token: uuid.UUID, job_ids: Sequence[int]) -> int:
    """Renew the leases of the running jobs a worker holds under ``token``.

    Rows another transaction has locked are skipped, not waited for: the worker's own
    open transaction may be finishing them (``EngineWorker._run_group``), and waiting
    there while holding the locks of the others could deadlock with it. A skipped row
    is renewed next beat; a lease outlasts several beats.
    """
    if not job_ids:
        return 0
    type_names = registry.names()
    params = {
        "now": clock.now(),
        "ids": list(job_ids),
        "token": token,
        "types": type_names,
        "leases": [float(_lease_for(t)) for t in type_names],
        "default": float(conf.lease_seconds()),
    }
    return sql.execute(sql.heartbeat(), params).rowcount


def record_progress(
    job_id: int, token: uuid.UUID, done: int, total: int | None, message: str, *, worker: str = ""
) -> bool:
    """Store a progress step and its history row; False if the attempt was fenced out."""
    now = clock.now()
    with transaction.atomic():
        running = Job.objects.filter(pk=job_id, state=State.RUNNING, lease_token=token)
        updated = running.update(
            progress_done=max(done, 0), progress_total=total, progress_message=message[:300]
        )
        if updated:
            # Numbered with the attempt it belongs to, as every other history row is (a
            # live view shows the event's attempt).
            attempt = running.values_list("attempts", flat=True).first() or 0
            _event(
                job_id,
                Kind.PROGRESS,
                State.RUNNING,
                State.RUNNING,
                message=message,
                worker=worker,
                at=now,
                done=done,
                total=total,
                attempt=attempt,
            )
    return bool(updated)


# --- the reaper's and the operators' transitions -----------------------------------------


def rescue(job: Job, *, now: datetime | None = None) -> str | None:
    """Take a running job back from a worker whose lease expired.

    Pending again if attempts remain, failed otherwise. An attempt is counted only when
    its handler starts (``start``), so a job its worker claimed and never started goes
    back with nothing spent. Returns the new state, or None if the job was no longer
    running with an expired lease (someone else won), or is locked by a transaction
    still open (a commit group), which a later round sees through.
    """
    now = now or clock.now()
    with transaction.atomic():
        # Locked and read again: the worker may have started the handler (counting the
        # attempt) since the reaper read the row.
        current = (
            Job.objects.select_for_update(skip_locked=True)
            .filter(pk=job.pk, state=State.RUNNING, lease_token=job.lease_token, lease_expires_at__lt=now)
            .values_list("attempts", "max_attempts")
            .first()
        )
        if current is None:
            return None
        attempts, max_attempts = current
        error = f"worker {job.locked_by} stopped heartbeating"
        if attempts < max_attempts:
            to_state = State.PENDING
            Job.objects.filter(pk=job.pk).update(
                state=State.PENDING,
                run_after=now,
                rescues=F("rescues") + 1,
                error_kind=Job.ErrorKind.LEASE_EXPIRED,
                last_error=error,
                **NO_LEASE,
            )
        else:
            to_state = State.FAILED
            Job.objects.filter(pk=job.pk).update(
                state=State.FAILED,
                finished_at=now,
                rescues=F("rescues") + 1,
                error_kind=Job.ErrorKind.LEASE_EXPIRED,
                last_error=f"{error}; attempts exhausted ({attempts})",
                **NO_LEASE,
            )
        _event(
            job,
            Kind.RESCUED,
            State.RUNNING,
            to_state,
            attempt=attempts,
            at=now,
            message=f"rescued from {job.locked_by} (lease expired {job.lease_expires_at:%H:%M:%S})",
        )
        if to_state == State.FAILED:
            cancel_dependants(job.pk, now)
        else:
            notify(job.queue)
    return to_state


# The states each operator action applies to: the one table the admin and the API read
# to offer only legal actions (the functions below enforce it under a row lock).
ACTION_STATES: dict[str, tuple[str, ...]] = {
    "recover": (State.RUNNING, State.PENDING),
    "retry": (State.FAILED, State.CANCELLED),
    "cancel": (State.PENDING, State.RUNNING),
    "run_now": (State.PENDING,),
    "replay": (State.SUCCEEDED, State.FAILED, State.CANCELLED),
}
# The actions that would run a job again: refused for a quarantined delivery's job.
RUNS_AGAIN = frozenset({"recover", "retry", "run_now", "replay"})


def _operator_change(
    job: Job, action: str, kind: str, actor: Any, message: str, via: str, **fields: Any
) -> Job:
    """Apply an operator's action if the job is still in a state that allows it; its
    history row names the actor and the door (``via``: admin, api, command)."""
    now = clock.now()
    expected = ACTION_STATES[action]
    with transaction.atomic():
        current = Job.objects.select_for_update().get(pk=job.pk)
        if current.state not in expected:
            raise IllegalTransition(
                f"job {job.pk} is {current.state}; {action.replace('_', ' ')} needs a job that is "
                f"{' or '.join(expected)}"
            )
        if action in RUNS_AGAIN:
            _refuse_if_quarantined(current, action)
        from_state = current.state
        try:
            with transaction.atomic():
                # Whatever the action, the job no longer sleeps on a wake key.
                Job.objects.filter(pk=job.pk).update(**fields, wake_key=None)
        except IntegrityError:
            raise IllegalTransition(_key_taken(current, action)) from None
        current.refresh_from_db()
        _event(
            current,
            kind,
            from_state,
            current.state,
            message=message,
            attempt=current.attempts,
            actor=actor,
            via=via,
            at=now,
        )
        handler = registry.get(current.type)
        hook = handler.operator_hook if handler is not None else None
        if hook is not None:
            hook(current, action, actor, via)
        if current.state in (State.FAILED, State.CANCELLED):
            cancel_dependants(current.pk, now)
        if current.state == State.PENDING:
            notify(current.queue)
    return current


def _refuse_if_quarantined(job: Job, action: str) -> None:
    """A quarantined delivery's job runs again only through its release. Read under the
    job's row lock, which quarantining takes too, so the two cannot cross."""
    delivery = (
        Delivery.objects.filter(job_id=job.pk, quarantined_at__isnull=False).only("id", "subscriber").first()
    )
    if delivery is not None:
        raise IllegalTransition(
            f"job {job.pk} is delivery {delivery.pk} to {delivery.subscriber}, which is "
            f"quarantined; release the delivery first (its release retries it), "
            f"{action.replace('_', ' ')} refused"
        )


def _key_taken(job: Job, action: str) -> str:
    """Why a job cannot be pending again: since it finished, another job took its key."""
    others = Job.objects.filter(tenant_id=job.tenant_id).exclude(pk=job.pk)
    held = [
        ("unique", job.unique_key, others.unfinished().filter(unique_key=job.unique_key)),
        ("pending", job.pending_key, others.waiting_to_start().filter(pending_key=job.pending_key)),
    ]
    for kind, key, holders in held:
        holder = holders.first() if key else None
        if holder is not None:
            return f"job {job.pk} cannot {action}: job {holder.pk} holds its {kind} key {key!r}"
    return f"job {job.pk} cannot {action}: another job holds its key"


def recover(job: Job, *, actor: Any = None, reason: str = "", via: str = "") -> Job:
    """Operator: a stuck job runs again now — a running one whose worker is presumed dead
    (that worker, if alive, is fenced out), or a pending one nobody picked up (it becomes
    due and the workers are woken). Grants one more attempt if all were spent."""
    now = clock.now()
    return _operator_change(
        job,
        "recover",
        Kind.RECOVERED,
        actor,
        reason or "recovered by an operator",
        via,
        state=State.PENDING,
        run_after=now,
        max_attempts=_at_least(F("max_attempts"), F("attempts") + 1),
        **NO_LEASE,
    )


def retry(job: Job, *, actor: Any = None, reason: str = "", via: str = "") -> Job:
    """Operator: a failed or cancelled job runs again from scratch (attempts reset)."""
    now = clock.now()
    return _operator_change(
        job, "retry", Kind.RETRIED, actor, reason or "retried by an operator", via, **_from_scratch(now)
    )


def replay(job: Job, *, actor: Any = None, reason: str = "", via: str = "") -> Job:
    """Operator: a finished job (succeeded, failed or cancelled) runs again from scratch,
    as a retry does; its history keeps the earlier outcome. For a delivery, one event
    delivered again to one subscriber."""
    now = clock.now()
    return _operator_change(
        job, "replay", Kind.REPLAYED, actor, reason or "replayed by an operator", via, **_from_scratch(now)
    )


def _from_scratch(now: datetime) -> dict[str, Any]:
    """A finished job pending again as if new: attempts, outcome and progress reset."""
    return {
        "state": State.PENDING,
        "run_after": now,
        "attempts": 0,
        "finished_at": None,
        "error_kind": "",
        "last_error": "",
        "result": None,
        "progress_done": 0,
        "progress_total": None,
        "progress_message": "",
    }


def cancel(job: Job, *, actor: Any = None, reason: str = "", via: str = "") -> Job:
    """Operator: stop a pending job, or fence out a running one (its result is refused)."""
    now = clock.now()
    return _operator_change(
        job,
        "cancel",
        Kind.CANCELLED,
        actor,
        reason or "cancelled by an operator",
        via,
        state=State.CANCELLED,
        finished_at=now,
        **NO_LEASE,
    )


def run_now(job: Job, *, actor: Any = None, reason: str = "", via: str = "") -> Job:
    """Operator: a pending job waiting for its run_after becomes due immediately."""
    return _operator_change(
        job, "run_now", Kind.RUN_NOW, actor, reason or "run now by an operator", via, run_after=clock.now()
    )


def _at_least(a: Any, b: Any) -> Any:
    from django.db.models.functions import Greatest

    return Greatest(a, b)


def cancel_dependants(parent_id: int, now: datetime) -> None:
    """Pending jobs waiting on a parent that will never succeed are cancelled, transitively."""
    frontier = [parent_id]
    while frontier:
        waiting = list(
            Job.objects.filter(parent_id__in=frontier, state=State.PENDING)
            .select_for_update()
            .values_list("pk", "parent_id")
        )
        if not waiting:
            return
        ids = [pk for pk, _ in waiting]
        Job.objects.filter(pk__in=ids).update(
            state=State.CANCELLED,
            finished_at=now,
            error_kind=Job.ErrorKind.PARENT_FAILED,
            last_error="its parent job did not succeed",
            wake_key=None,
        )
        JobEvent.objects.bulk_create(
            JobEvent(
                job_id=pk,
                at=now,
                kind=Kind.CANCELLED,
                from_status=State.PENDING,
                to_status=State.CANCELLED,
                message=f"parent job {parent} did not succeed",
            )
            for pk, parent in waiting
        )
        frontier = ids
