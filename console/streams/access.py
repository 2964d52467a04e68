"""The synchronous side of a stream: who is asking, may they see it, what did they miss.

Each function runs in a worker thread (``in_slot``) and closes that thread's
database connection before returning, so that an open stream holds no connection: the
hub does the live querying for every client of the process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.http import HttpRequest
from rest_framework.exceptions import AuthenticationFailed

from console.streams import serialize
from console.streams.hub import get_hub
from console.throttling import CountedTokenAuthentication
from jobs.models import Job
from jobs.redaction import sees_tracebacks
from tenancy.scoping import scope_queryset, tenant_scope

T = TypeVar("T")
REPLAY_PAGE = 1_000


def releasing_connection(fn: Callable[..., T]) -> Callable[..., T]:
    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    run.__name__ = fn.__name__
    return run


def authenticate(request: HttpRequest) -> User | AnonymousUser | None:
    """The session's user, else the DRF token's; None for a bad token. Raises DRF's
    Throttled while the address is over its rate of failed tokens (as the API does)."""
    if request.user.is_authenticated:
        return request.user
    try:
        found = CountedTokenAuthentication().authenticate(request)  # type: ignore[arg-type]
    except AuthenticationFailed:
        return None
    return found[0] if found else AnonymousUser()


@releasing_connection
def open_stream(request: HttpRequest, kind: str, key: Any) -> tuple[int, int | bool, bool, Any]:
    """(HTTP status, tenant scope, whether the reader sees tracebacks, the reader's user
    id) for a stream of ``kind`` ("job"/"pipeline") ``key``."""
    user = authenticate(request)
    if user is None or not user.is_authenticated:
        return 401, False, False, None
    scope = tenant_scope(user)
    if scope is False or scope is None:
        return 404, False, False, None
    jobs = scope_queryset(Job.objects.all(), user)
    found = jobs.filter(pk=key) if kind == "job" else jobs.filter(pipeline_id=key)
    if not found.exists():
        return 404, False, False, None
    return 200, scope, sees_tracebacks(user), user.pk


@releasing_connection
def user_scope(user: User | AnonymousUser) -> int | bool:
    scope = tenant_scope(user)
    return False if scope is None else scope


@releasing_connection
def visible(scope: int | bool, kind: str, key: Any) -> bool:
    """Whether a job or pipeline exists within ``scope`` (the WebSocket's check)."""
    if scope is False:
        return False
    jobs = _scoped_jobs(scope)
    return (jobs.filter(pk=key) if kind == "job" else jobs.filter(pipeline_id=key)).exists()


@releasing_connection
def visible_jobs(scope: int | bool, ids: list[int]) -> list[int]:
    """Those of ``ids`` that are jobs within ``scope``, in one query."""
    if scope is False or not ids:
        return []
    found = set(_scoped_jobs(scope).filter(pk__in=ids).values_list("pk", flat=True))
    return [pk for pk in dict.fromkeys(ids) if pk in found]


def _scoped_jobs(scope: int | bool) -> Any:
    return Job.objects.all() if scope is True else Job.objects.filter(tenant_id=scope)


def replay_overlap_seconds() -> float:
    """How far before the Last-Event-ID row's ``at`` a replay reaches back (see
    serialize.JOB_EVENTS_AFTER): a transaction that commits its events later than this
    after writing them can still be missed by a reconnecting client."""
    return float(getattr(settings, "STREAMS_REPLAY_OVERLAP_SECONDS", 5))


@releasing_connection
def replay_page(
    scope: int | bool, kind: str, key: Any, after: int, overlap: bool
) -> list[serialize.StreamEvent]:
    """Up to REPLAY_PAGE history rows of the job or pipeline within ``scope``, with id >
    ``after`` (and, with ``overlap``, the rows up to ``after`` written shortly before it)."""
    statement = serialize.JOB_EVENTS_AFTER if kind == "job" else serialize.PIPELINE_EVENTS_AFTER
    params = {
        kind: key if kind == "job" else uuid.UUID(str(key)),
        "after": after,
        "limit": REPLAY_PAGE,
        "overlap": replay_overlap_seconds() if overlap else 0.0,
        **serialize.scope_params(scope),
    }
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [serialize.event_from_row(row) for row in cursor.fetchall()]


@releasing_connection
def finished(scope: int | bool, kind: str, key: Any) -> serialize.End | None:
    """The job's or pipeline's end, as a reader with ``scope`` sees it (a tenant's reader:
    the end of that tenant's part of the pipeline), if it is finished now; else None."""
    with connection.cursor() as cursor:
        if kind == "job":
            cursor.execute(serialize.FINISHED_JOBS, {"jobs": [key]})
            ends = serialize.ends_from_rows(cursor.fetchall(), [])
        else:
            cursor.execute(serialize.FINISHED_PIPELINES, {"pipelines": [uuid.UUID(str(key))]})
            ends = serialize.ends_from_rows([], cursor.fetchall())
    return next((end for end in ends if end.visible_to(scope)), None)


async def in_slot(fn: Callable[..., T], *args: Any) -> T:
    """``fn`` in a thread, holding one of the process's database slots (Hub.db_slots)."""
    async with get_hub().db_slots:
        return await sync_to_async(fn)(*args)
