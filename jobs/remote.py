"""Remote workers: jobs run outside the cluster, by workers that hold no database
credentials, through the engine's own transitions.

A remote worker holds a credential (``JOBS_REMOTE_WORKERS``: a name, a bearer token, the
queues it may serve) and speaks to the internal API (``console.api.remote``), which calls
the functions here. It claims jobs of the types registered with ``jobs.remote`` on its
queues, renews their leases by heartbeats (a third of the shortest lease it holds, as
the claim tells it), reports progress with them, and ends each attempt with a success,
a failure or a snooze, each under the lease token of its claim. Everything else is the
engine's: the claim (``SKIP LOCKED``, fair shares, concurrency keys), the fencing (a
report under a token that is no longer current changes nothing), the reaper (a worker
that stops beating loses its jobs after their lease), attempts and backoff, the history
and the live streams.

Two things reach a remote job only through its worker, and so come back in every
heartbeat's answer as a job the worker no longer holds: an operator's cancel (or
recovery), and the job's time limit, which the engine enforces here, at the first
heartbeat past it, by failing the attempt as a local worker's limit does. The worker
then stops that job's work and throws away what it wrote.
"""

from __future__ import annotations

import contextlib
import hmac
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from jobs import arguments, clock, conf, engine, errors, registry
from jobs.errors import InvalidArgument, LeaseLost
from jobs.heartbeat import register_worker
from jobs.models import Job, Worker

State = Job.State

# A claim's jobs at most, and a heartbeat's.
MAX_CLAIM = 100
MAX_HELD = 1_000
# The longest snooze a remote worker may ask for.
MAX_SNOOZE_SECONDS = 30 * 24 * 3600
# What a worker's name may be: it is shown, and prefixed with its credential's.
WORKER_NAME_LENGTH = 120


@dataclass(frozen=True)
class Credential:
    """Who a remote worker is, and which queues it may serve."""

    name: str
    queues: tuple[str, ...]
    # Kept out of the repr: a credential in a log line or a traceback must not carry it.
    token: str = field(repr=False)

    def worker(self, name: str) -> str:
        """The worker's name in claims, history and the console: ``<credential>/<name>``,
        so that no remote worker can pass for a cluster process or another credential's."""
        return f"{self.name}/{name}"


def credentials() -> list[Credential]:
    """The configured credentials (``JOBS_REMOTE_WORKERS``), checked by ``jobs.E005``."""
    configured = conf.remote_workers()
    return [
        Credential(name, tuple(entry.get("queues", ())), str(entry.get("token", "")))
        for name, entry in sorted(configured.items())
        if isinstance(entry, Mapping)
    ]


def credential_problems() -> list[str]:
    """What is wrong with ``JOBS_REMOTE_WORKERS``, one sentence each."""
    problems = []
    configured = conf.remote_workers()
    if not isinstance(configured, Mapping):
        return [f"JOBS_REMOTE_WORKERS must map credential names to {{token, queues}}, not {configured!r}"]
    tokens: dict[str, str] = {}
    for name, entry in sorted(configured.items()):
        if not isinstance(entry, Mapping) or set(entry) - {"token", "queues"}:
            problems.append(f"credential {name!r} must be {{'token': …, 'queues': […]}}")
            continue
        token, queues = entry.get("token"), entry.get("queues")
        if not isinstance(token, str) or len(token) < 32:
            problems.append(f"credential {name!r}: its token must be at least 32 characters")
        elif token in tokens:
            problems.append(f"credentials {tokens[token]!r} and {name!r} share a token")
        else:
            tokens[token] = name
        if (
            not isinstance(queues, list | tuple)
            or not queues
            or not all(isinstance(q, str) and 0 < len(q) <= engine.QUEUE_LENGTH for q in queues)
        ):
            problems.append(f"credential {name!r}: queues must be a non-empty list of queue names")
    return problems


def authenticate(authorization: str) -> Credential | None:
    """The credential whose ``Bearer`` token the header carries (compared in constant
    time with each), or None."""
    scheme, _, offered = authorization.partition(" ")
    if scheme != "Bearer" or not offered:
        return None
    found = None
    for credential in credentials():
        if credential.token and hmac.compare_digest(credential.token.encode(), offered.encode()):
            found = credential
    return found


class NotHeld(Exception):
    """A report on a job the worker's lease no longer holds: cancelled, recovered,
    rescued, timed out or finished meanwhile, or never this lease's. ``lost`` says
    which, for the answer."""

    def __init__(self, lost: dict[str, Any]) -> None:
        super().__init__(f"job {lost['id']} is no longer held by this lease: {lost['reason']}")
        self.lost = lost


@dataclass(frozen=True)
class Claimed:
    """A claim's jobs, started: their attempts are counted. ``details`` holds what each
    job's type tells its worker (``RemoteHooks.describe``), by job id."""

    token: uuid.UUID
    worker: str
    jobs: list[Job]
    heartbeat_seconds: float
    details: dict[int, dict[str, Any]]


def hooks_of(job: Job) -> registry.RemoteHooks:
    handler = registry.get(job.type)
    return handler.hooks if handler and handler.hooks else registry.RemoteHooks()


def lease_of(job: Job) -> float:
    handler = registry.get(job.type)
    return float(handler.lease) if handler and handler.lease else float(conf.lease_seconds())


def time_limit_of(job: Job) -> float:
    handler = registry.get(job.type)
    chosen = handler.hooks.time_limit(job) if handler and handler.hooks and handler.hooks.time_limit else None
    if chosen is not None:
        return float(chosen)
    return float(handler.timeout) if handler and handler.timeout else float(conf.handler_timeout_seconds())


def deadline_of(job: Job) -> datetime | None:
    """When the job's attempt runs past its time limit (None for a job not running)."""
    if job.locked_at is None:
        return None
    return job.locked_at + timedelta(seconds=time_limit_of(job))


def heartbeat_seconds(leases: Iterable[float]) -> float:
    """How often a worker holding jobs of these leases beats: a third of the shortest,
    so that two beats may be lost before any lease runs out."""
    return round(min(leases, default=float(conf.lease_seconds())) / 3, 3)


def _served(credential: Credential, queues: Sequence[str] | None) -> list[str]:
    if queues is None or not list(queues):
        return list(credential.queues)
    foreign = sorted(set(queues) - set(credential.queues))
    if foreign:
        raise InvalidArgument(
            "queues",
            f"queues: credential {credential.name!r} serves {', '.join(credential.queues)}, "
            f"not {', '.join(foreign)}",
        )
    return list(dict.fromkeys(queues))


def _worker_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > WORKER_NAME_LENGTH or not name.isprintable():
        raise InvalidArgument(
            "worker",
            f"worker must be 1 to {WORKER_NAME_LENGTH} printable characters, got {arguments.describe(name)}",
        )
    return name


def seen(credential: Credential, worker: str) -> str:
    """Keep the worker's row in the console's list of live workers; its full name."""
    name = credential.worker(_worker_name(worker))
    register_worker(
        name,
        hostname=Worker.REMOTE_HOST.format(credential=credential.name),
        pid=0,
        queues=list(credential.queues),
    )
    return name


def claim(credential: Credential, worker: str, *, limit: int, queues: Sequence[str] | None = None) -> Claimed:
    """Take up to ``limit`` due jobs of the remote types on the credential's queues (or
    those of them named), and count their attempts: a remote worker starts what it
    claims at once, and hands back with ``release`` what it will not run."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_CLAIM:
        raise InvalidArgument("limit", f"limit must be 1 to {MAX_CLAIM}, got {arguments.describe(limit)}")
    served = _served(credential, queues)
    name = seen(credential, worker)
    types = registry.remote_names()
    if not types:
        return Claimed(uuid.uuid4(), name, [], heartbeat_seconds(()), {})
    batch = engine.claim(name, limit=limit, queues=served, types=types)
    started = engine.start(batch.jobs, batch.token)
    taken, details = [], {}
    for job in batch.jobs:
        if job.pk not in started:
            continue
        described = _described(job, batch.token, name)
        if described is not None:
            taken.append(job)
            details[job.pk] = described
    return Claimed(batch.token, name, taken, heartbeat_seconds(lease_of(job) for job in taken), details)


def _described(job: Job, token: uuid.UUID, worker: str) -> dict[str, Any] | None:
    """What the worker is told of ``job`` besides its payload; None when its type cannot
    say (its own row is gone, say): then no worker could run it, and it fails for good
    with the reason rather than being claimed again and again."""
    describe = hooks_of(job).describe
    if describe is None:
        return {}
    try:
        with transaction.atomic():
            return dict(describe(job))
    except Exception as error:
        with contextlib.suppress(LeaseLost):
            engine.fail(
                job,
                token,
                f"cannot be run: {error}",
                permanent=True,
                worker=worker,
                error_kind=Job.ErrorKind.PERMANENT,
            )
        return None


def _token(value: Any) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        raise InvalidArgument(
            "lease", f"lease must be the token of a claim, got {arguments.describe(value)}"
        ) from None


def _held_jobs(credential: Credential, token: uuid.UUID, ids: Iterable[int]) -> dict[int, Job]:
    return {
        job.pk: job
        for job in Job.objects.filter(
            pk__in=list(ids), state=State.RUNNING, lease_token=token, queue__in=credential.queues
        )
    }


def _lost(credential: Credential, ids: Iterable[int]) -> list[dict[str, Any]]:
    """What became of jobs a lease no longer holds, for the worker to stop them."""
    wanted = list(ids)
    rows = {
        pk: (state, error_kind)
        for pk, state, error_kind in Job.objects.filter(
            pk__in=wanted, queue__in=credential.queues
        ).values_list("id", "state", "error_kind")
    }
    return [{"id": pk, **_why_lost(*rows.get(pk, ("", "")))} for pk in wanted]


def _why_lost(state: str, error_kind: str) -> dict[str, str]:
    if not state:
        reason = "no such job on this credential's queues"
    elif state == State.CANCELLED:
        reason = "cancelled"
    elif state == State.RUNNING:
        reason = "claimed again under another lease"
    elif error_kind == Job.ErrorKind.TIMEOUT:
        reason = "ran past its time limit"
    elif error_kind == Job.ErrorKind.LEASE_EXPIRED:
        reason = "its lease expired and the reaper took it back"
    elif state == State.SUCCEEDED:
        reason = "already finished"
    elif state == State.PENDING:
        reason = "handed back to pending (an operator's recovery)"
    else:
        reason = f"now {state}"
    return {"state": state, "reason": reason}


@dataclass(frozen=True)
class Beat:
    renewed: list[int]
    lost: list[dict[str, Any]]
    heartbeat_seconds: float


def heartbeat(
    credential: Credential,
    worker: str,
    lease: Any,
    job_ids: Sequence[int],
    *,
    progress: Mapping[int, tuple[int, int | None, str]] | None = None,
) -> Beat:
    """Renew the leases of the jobs a worker holds under ``lease``, record their progress,
    and say which it no longer holds, and why. A job past its time limit is failed here
    (retried after its backoff, or failed for good), as a local handler's limit does."""
    token = _token(lease)
    ids = _job_ids(job_ids)
    name = seen(credential, worker)
    held = _held_jobs(credential, token, ids)
    now = clock.now()
    for job in list(held.values()):
        deadline = deadline_of(job)
        if deadline is not None and now >= deadline:
            with contextlib.suppress(LeaseLost):
                _fail(
                    job,
                    token,
                    f"HandlerTimeout: ran past its time limit of {time_limit_of(job):g} s",
                    name,
                    Job.ErrorKind.TIMEOUT,
                )
            del held[job.pk]
    for pk, (done, total, message) in (progress or {}).items():
        if pk in held:
            engine.record_progress(pk, token, done, total, message, worker=name)
    renewed = sorted(held) if not held else _renewed(token, sorted(held))
    return Beat(
        renewed,
        _lost(credential, [pk for pk in ids if pk not in renewed]),
        heartbeat_seconds(lease_of(job) for job in held.values()),
    )


def _renewed(token: uuid.UUID, ids: list[int]) -> list[int]:
    engine.heartbeat(token, ids)
    # Renewed or not this beat (a row busy in another transaction is skipped), a job
    # still running under the token is held.
    return sorted(
        Job.objects.filter(pk__in=ids, state=State.RUNNING, lease_token=token).values_list("id", flat=True)
    )


def _job_ids(values: Any) -> list[int]:
    if not isinstance(values, list | tuple) or len(values) > MAX_HELD:
        raise InvalidArgument("jobs", f"jobs must be a list of at most {MAX_HELD} job ids")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise InvalidArgument("jobs", "jobs must be a list of job ids")
    return list(dict.fromkeys(values))


def _held(credential: Credential, job_id: int, lease: Any) -> tuple[Job, uuid.UUID]:
    token = _token(lease)
    job = _held_jobs(credential, token, [job_id]).get(job_id)
    if job is None:
        raise NotHeld(_lost(credential, [job_id])[0])
    return job, token


def _fenced(credential: Credential, job: Job, call: Any) -> Any:
    try:
        return call()
    except LeaseLost:
        raise NotHeld(_lost(credential, [job.pk])[0]) from None


def complete(
    credential: Credential,
    worker: str,
    job_id: int,
    lease: Any,
    *,
    result: Any = None,
    progress: tuple[int, int | None, str] | None = None,
) -> Job:
    """Record the attempt's success (and its last progress step); ``NotHeld`` if fenced.
    ``result``, if any, is a JSON object, shown with the job as a local handler's is."""
    job, token = _held(credential, job_id, lease)
    name = seen(credential, worker)
    if result is not None:
        arguments.payload(result, "result")
    on_complete = hooks_of(job).on_complete
    with transaction.atomic():
        _fenced(
            credential,
            job,
            lambda: engine.complete(job, token, result=result, worker=name, progress=progress),
        )
        if on_complete is not None:
            on_complete(job, result)
    job.refresh_from_db()
    return job


def fail(
    credential: Credential,
    worker: str,
    job_id: int,
    lease: Any,
    *,
    error: str,
    permanent: bool = False,
) -> Job:
    """Record a failed attempt: retried after the type's backoff while attempts remain,
    failed for good otherwise or when ``permanent``; ``NotHeld`` if fenced."""
    if not isinstance(error, str) or not error.strip():
        raise InvalidArgument("error", "error must say what went wrong")
    job, token = _held(credential, job_id, lease)
    name = seen(credential, worker)
    kind = Job.ErrorKind.PERMANENT if permanent else None
    _fenced(credential, job, lambda: _fail(job, token, error[:10_000], name, kind, permanent=permanent))
    job.refresh_from_db()
    return job


def _fail(
    job: Job, token: uuid.UUID, error: str, worker: str, kind: str | None, *, permanent: bool = False
) -> str:
    """``engine.fail``, and the type's ``on_fail`` in the same transaction, given the job
    as the failure left it (its state, ``error_kind`` and attempts)."""
    on_fail = hooks_of(job).on_fail
    with transaction.atomic():
        state = engine.fail(job, token, error, permanent=permanent, worker=worker, error_kind=kind)
        if on_fail is not None:
            job.refresh_from_db(fields=["state", "error_kind", "last_error", "attempts", "run_after"])
            on_fail(job, error, state == State.FAILED)
    return state


def snooze(
    credential: Credential,
    worker: str,
    job_id: int,
    lease: Any,
    *,
    seconds: float,
    message: str = "",
    wake_on: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> Job:
    """Put the job back to sleep for ``seconds`` with its attempt given back (a poll that
    found the work still going); ``NotHeld`` if fenced. ``details`` go to the type's
    ``on_snooze``, whose answer, if any, replaces ``seconds``."""
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not math.isfinite(seconds)
        or not 0 <= seconds <= MAX_SNOOZE_SECONDS
    ):
        raise InvalidArgument(
            "seconds", f"seconds must be 0 to {MAX_SNOOZE_SECONDS}, got {arguments.describe(seconds)}"
        )
    if wake_on is not None:
        errors.wake_key(wake_on, "wake_on")
    job, token = _held(credential, job_id, lease)
    name = seen(credential, worker)
    on_snooze = hooks_of(job).on_snooze
    with transaction.atomic():
        # The job's row first, as every other step takes it before the type's own rows
        # (two orders would deadlock), and the fence checked before the hook runs.
        if (
            not Job.objects.select_for_update()
            .filter(pk=job.pk, state=State.RUNNING, lease_token=token)
            .exists()
        ):
            raise NotHeld(_lost(credential, [job.pk])[0])
        if on_snooze is not None:
            chosen = on_snooze(job, dict(details or {}))
            seconds = seconds if chosen is None else chosen
        _fenced(
            credential,
            job,
            lambda: engine.snooze(
                job, token, float(seconds), message=message[:2_000], worker=name, wake_on=wake_on
            ),
        )
    job.refresh_from_db()
    return job


def release(credential: Credential, worker: str, lease: Any, job_ids: Sequence[int]) -> int:
    """Hand back jobs the worker will not finish (it is shutting down), their attempts
    given back, each type's ``on_release`` in the same transaction; returns how many
    went back."""
    token = _token(lease)
    held = list(_held_jobs(credential, token, _job_ids(job_ids)).values())
    name = seen(credential, worker)
    with transaction.atomic():
        released = engine.release(
            held,
            token,
            worker=name,
            started=[job.pk for job in held],
            message="handed back by its remote worker",
        )
        back = set(
            Job.objects.filter(pk__in=[job.pk for job in held], state=State.PENDING).values_list(
                "id", flat=True
            )
        )
        for job in held:
            on_release = hooks_of(job).on_release
            if on_release is not None and job.pk in back:
                on_release(job)
        return released
