"""Stream items: JobEvent rows joined with their job, in the shape of the stream contract
(docs/streams.md), and the "finished" facts that end a job's or a pipeline's stream.

The SQL here runs on two kinds of connection: the hub's async psycopg connection (live
batches) and Django's connection (replay), so it is written once with psycopg's named
placeholders, which both accept.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from jobs.redaction import without_traceback

TERMINAL = ("succeeded", "failed", "cancelled")

_SELECT = """
SELECT e.id, e.job_id, j.pipeline_id, j.type, j.parent_id, e.kind, e.from_status, e.to_status,
       j.state, e.attempt, e.at, e.message, e.progress_done, e.progress_total, e.worker,
       j.tenant_id
FROM jobs_jobevent e JOIN jobs_job j ON j.id = e.job_id
"""
# The live follower (console/streams/pgsource.py): the rows past the newest id it has read
# (a range scan of the primary key); which of the ids it missed below that id are now
# visible, given as runs of consecutive ids (a range scan per run, ids only: the planner
# cannot know how long a run is, and joined with the jobs it would guess a third of the
# table); then those rows with their jobs, by id.
EVENTS_AFTER = _SELECT + "WHERE e.id > %(last)s ORDER BY e.id LIMIT %(limit)s"
IDS_IN_RANGES = """
SELECT e.id FROM unnest(%(lo)s::bigint[], %(hi)s::bigint[]) AS r(lo, hi)
JOIN jobs_jobevent e ON e.id BETWEEN r.lo AND r.hi
"""
EVENTS_BY_ID = _SELECT + "WHERE e.id = ANY(%(ids)s::bigint[]) ORDER BY e.id"

# Replay after Last-Event-ID: a job's timeline (jobs_jobevent_job_idx), or a pipeline's, within
# the reader's tenant scope (%(all)s: every tenant). Rows can commit out of id order
# (concurrent transactions, e.g. parallel recalculation chunks), so with %(overlap)s the
# replay also resends the rows up to ``after`` written within that many seconds before row
# ``after`` itself: a row with a smaller id committed after the client saw ``after`` is not
# skipped. The stream is at-least-once; clients drop the ids they already have.
_AFTER = """
  AND (%(all)s::boolean OR j.tenant_id = %(tenant)s::bigint)
  AND (e.id > %(after)s
       OR (%(overlap)s::float8 > 0
           AND e.at >= (SELECT r.at FROM jobs_jobevent r WHERE r.id = %(after)s)
                       - %(overlap)s::float8 * interval '1 second'))
ORDER BY e.id LIMIT %(limit)s
"""
JOB_EVENTS_AFTER = _SELECT + "WHERE e.job_id = %(job)s" + _AFTER
PIPELINE_EVENTS_AFTER = _SELECT + "WHERE j.pipeline_id = %(pipeline)s" + _AFTER

# A job is finished when its state is terminal; its stream may end once its last event
# went out (a batch can hold the success while a later commit's row is still on its way).
FINISHED_JOBS = """
SELECT j.id, j.state, (SELECT max(e.id) FROM jobs_jobevent e WHERE e.job_id = j.id)
FROM jobs_job j WHERE j.id = ANY(%(jobs)s) AND j.state IN ('succeeded', 'failed', 'cancelled')
"""
# A pipeline is finished when none of its jobs is pending or running. Pipelines can mix
# tenants (a factor upload: a tenantless ingest, then one aggregation per module with that
# module's tenant), so besides the whole pipeline (``whole`` = 1, for readers who see every
# tenant) each tenant's part has its own end: a tenant's reader learns neither the state nor
# the timing of another tenant's jobs.
FINISHED_PIPELINES = """
SELECT j.pipeline_id, GROUPING(j.tenant_id), j.tenant_id,
       CASE WHEN bool_or(j.state = 'failed') THEN 'failed'
            WHEN bool_or(j.state = 'cancelled') THEN 'cancelled' ELSE 'succeeded' END,
       max((SELECT max(e.id) FROM jobs_jobevent e WHERE e.job_id = j.id))
FROM jobs_job j WHERE j.pipeline_id = ANY(%(pipelines)s)
GROUP BY GROUPING SETS ((j.pipeline_id), (j.pipeline_id, j.tenant_id))
HAVING NOT bool_or(j.state IN ('pending', 'running'))
"""


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One JobEvent as streamed: the contract's JSON (``data``) plus what routing needs."""

    id: int
    job: int
    pipeline: str
    type: str
    tenant: int | None
    data: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "data": self.data}

    def data_for(self, staff: bool) -> dict[str, Any]:
        """The contract's JSON as a reader sees it: a failure's message carries the
        traceback for staff only (``jobs.redaction``)."""
        message = self.data["message"]
        if staff or not message:
            return self.data
        short = without_traceback(message)
        return self.data if short == message else {**self.data, "message": short}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> StreamEvent:
        data = wire["data"]
        return cls(data["id"], data["job"], data["pipeline"], data["type"], wire["tenant"], data)


@dataclass(frozen=True, slots=True)
class End:
    """A finished job or pipeline: its final state, and the id of its last event.

    ``tenant`` is None for a job, and for a whole pipeline; a tenant's id for the end of
    that tenant's part of a pipeline (see FINISHED_PIPELINES)."""

    key: tuple[str, Any]  # ("job", id) or ("pipeline", "<uuid>")
    state: str
    last_event_id: int
    tenant: int | None = None

    def visible_to(self, scope: int | bool) -> bool:
        """Whether a reader with tenant ``scope`` (True: every tenant) gets this end."""
        if self.key[0] == "job":
            return True  # the reader was allowed to see the job when it subscribed
        if scope is True:
            return self.tenant is None
        return scope is not False and self.tenant is not None and self.tenant == scope

    def to_wire(self) -> list[Any]:
        return [self.key[0], self.key[1], self.state, self.last_event_id, self.tenant]

    @classmethod
    def from_wire(cls, wire: list[Any]) -> End:
        return cls((wire[0], wire[1]), wire[2], wire[3], wire[4] if len(wire) > 4 else None)

    def data(self) -> dict[str, Any]:
        return {self.key[0]: self.key[1], "state": self.state}


def event_from_row(row: tuple[Any, ...]) -> StreamEvent:
    (
        event_id,
        job_id,
        pipeline,
        job_type,
        parent,
        kind,
        from_status,
        to_status,
        job_state,
        attempt,
        at,
        message,
        done,
        total,
        worker,
        tenant,
    ) = row
    pipeline = str(pipeline)
    progress = {"done": done, "total": total} if done is not None else None
    data = {
        "id": event_id,
        "job": job_id,
        "pipeline": pipeline,
        "type": job_type,
        "parent": parent,
        "kind": kind,
        "from_status": from_status,
        "to_status": to_status,
        "state": to_status or job_state,
        "attempt": attempt,
        "at": at.isoformat(),
        "message": message,
        "progress": progress,
        "worker": worker,
    }
    return StreamEvent(event_id, job_id, pipeline, job_type, tenant, data)


def range_params(ranges: list[tuple[int, int]]) -> dict[str, list[int]]:
    return {"lo": [lo for lo, _ in ranges], "hi": [hi for _, hi in ranges]}


def finished_keys(events: list[StreamEvent]) -> tuple[list[int], list[uuid.UUID]]:
    """Jobs and pipelines worth a "finished?" query: those of events on finished jobs."""
    done = [e for e in events if e.data["state"] in TERMINAL]
    jobs = sorted({e.job for e in done})
    pipelines = sorted({uuid.UUID(e.pipeline) for e in done})
    return jobs, pipelines


def ends_from_rows(job_rows: list[tuple[Any, ...]], pipeline_rows: list[tuple[Any, ...]]) -> list[End]:
    ends = [End(("job", job_id), state, last or 0) for job_id, state, last in job_rows]
    for pid, whole, tenant, state, last in pipeline_rows:
        if whole or tenant is not None:  # the tenantless jobs' part is nobody's to read alone
            ends.append(End(("pipeline", str(pid)), state, last or 0, None if whole else tenant))
    return ends


def scope_params(scope: int | bool) -> dict[str, Any]:
    """The replay queries' tenant condition for a reader's scope (True: every tenant)."""
    return {"all": scope is True, "tenant": None if isinstance(scope, bool) else scope}
