"""Recalculating an ingest's rows while it is still loading them.

An ingest writes entries only and the recalculation writes emissions only, but they need
not run one after the other. Every ``RECALC_CHUNK_ROWS`` rows, in the transaction of the
batch that completes the chunk, the ingest queues an ``emission_recalc`` of the ids it
has loaded since the last chunk; another worker computes those emissions while the load
goes on. Queued with the rows they cover, chunks are never lost nor doubled by a crash.

Chunks are contiguous: each begins where the ingest's previous one ended, even across
attempts, so rows an attempt loaded before a crash are in the next chunk.

When the ingest succeeds it chains the usual recalculation of its module, marked as the
*closing* one of that ingest: it waits (snoozes) while a chunk of the ingest is still
unfinished, then covers every id from the first one no succeeded chunk covers (the tail
of the load, and any chunk that failed), and only then chains the aggregation. So the
stats are computed once, after every emission of the upload is in.

Chunks cover disjoint id ranges, so they take no concurrency key: once the load is done,
every free worker prices the chunks still waiting, side by side. Ids come from the
entries' identity sequence: a range taken in one session holds every row that session
inserted in it (and maybe rows of others, which the recalculation handles the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection

import jobs
from factors import conf
from factors.emissions import Scope
from jobs import clock
from jobs.models import Job

RECALC = "factors.emission_recalc"
SNOOZE_SECONDS = 0.25


def _sequence_value(function: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(pg_get_serial_sequence('factors_dataentry', 'id'))")
        return cursor.fetchone()[0]


@dataclass
class ChunkQueue:
    """Queues the recalculation of each chunk of rows an ingest attempt loads."""

    job: Job
    module_id: int
    data_entry_type: str
    size: int = field(default_factory=conf.recalc_chunk_rows)
    after: int = 0
    pending: int = 0
    queued: int = 0

    def start(self) -> None:
        """Find where the next chunk begins: where the ingest's last chunk ended, or
        before its first row (an earlier attempt may have loaded rows without queueing a
        chunk for them), or, for a fresh start, at a new id (taken, and wasted)."""
        if not self.size:
            return
        last = (Job.objects.filter(pipeline_id=self.job.pipeline_id, type=RECALC,
                                   payload__chunk_of=self.job.pk)
                .order_by("-id").values_list("payload", flat=True).first())
        if last is not None:
            self.after = Scope.from_payload(last).upto or 0
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT min(id) - 1 FROM factors_dataentry WHERE module_id = %s "
                           "AND data_entry_type = %s AND job_id = %s",
                           [self.module_id, self.data_entry_type, self.job.pk])
            first = cursor.fetchone()[0]
        self.after = first if first is not None else _sequence_value("nextval")

    def batch_loaded(self, rows: int) -> None:
        """Called in a batch's transaction after its COPY."""
        if not self.size:
            return
        self.pending += rows
        if self.pending < self.size:
            return
        upto = _sequence_value("currval")
        scope = Scope(self.data_entry_type, self.module_id, after=self.after, upto=upto)
        jobs.enqueue(RECALC, {**scope.payload(), "chunk_of": self.job.pk},
                     pipeline=self.job.pipeline_id, tenant=self.job.tenant_id,
                     created_by=self.job.created_by_id)
        self.after, self.pending = upto, 0
        self.queued += 1


def closing_payload(scope: Scope, ingest: Job) -> dict[str, object]:
    """The payload of the recalculation an ingest chains when it succeeds."""
    return {**scope.payload(), "closes": ingest.pk}


def closing_scope(job: Job, scope: Scope, ingest_id: int) -> Scope:
    """What ``job``, the closing recalculation of ``ingest_id``, must still cover.

    Raises ``jobs.Snooze`` while a chunk of that ingest is unfinished (until the first of
    them is due again: a chunk waiting out a retry's backoff is not polled for).
    """
    chunks = list(Job.objects.filter(pipeline_id=job.pipeline_id, type=RECALC,
                                     payload__chunk_of=ingest_id)
                  .values_list("state", "payload", "run_after"))
    waiting = [run_after for state, _, run_after in chunks if state in Job.UNFINISHED]
    if waiting:
        delay = max((min(waiting) - clock.now()).total_seconds(), SNOOZE_SECONDS)
        raise jobs.Snooze(delay, f"waiting for {len(waiting)} chunk(s) of job {ingest_id}")
    done = [Scope.from_payload(p) for state, p, _ in chunks if state == Job.State.SUCCEEDED]
    left = [Scope.from_payload(p) for state, p, _ in chunks if state != Job.State.SUCCEEDED]
    if left:
        after = min(chunk.after for chunk in left)
    else:
        after = max((chunk.upto or 0 for chunk in done), default=0)
    return Scope(scope.data_entry_type, scope.module_id, scope.years, after=after)

