"""Recalculating an ingest's rows while it is still loading them.

An ingest writes entries only and the recalculation writes emissions only, but they need
not run one after the other. Every ``RECALC_CHUNK_ROWS`` rows, in the transaction of the
batch that completes the chunk, the ingest queues an ``emission_recalc`` of the ids it
has loaded since the last chunk, and records the chunk (``LoadChunk``); another worker
computes those emissions while the load goes on. Queued with the rows they cover, chunks
are never lost nor doubled by a crash.

Chunks are contiguous: each begins where the ingest's previous one ended, even across
attempts, so rows an attempt loaded before a crash are in the next chunk.

When the ingest succeeds it chains the usual recalculation of its module, marked as the
*closing* one of that ingest and enqueued with ``after=`` every chunk's job: the engine
runs it once they have all finished, whatever their outcomes (a fan-in). It then covers
every id from the first one no succeeded chunk covers (the tail of the load, and any
chunk that failed or was cancelled), and only then chains the aggregation. So the stats
are computed once, after every emission of the upload is in.

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
from factors.models import LoadChunk

RECALC = "factors.emission_recalc"


def _sequence_value(function: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(pg_get_serial_sequence('factors_dataentry', 'id'))")
        return cursor.fetchone()[0]


@dataclass
class ChunkQueue:
    """Queues the recalculation of each chunk of rows an ingest attempt loads."""

    job: jobs.Job
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
        last = (
            LoadChunk.objects.filter(load_id=self.job.pk)
            .order_by("-upto")
            .values_list("upto", flat=True)
            .first()
        )
        if last is not None:
            self.after = last
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT min(id) - 1 FROM factors_dataentry WHERE module_id = %s "
                "AND data_entry_type = %s AND job_id = %s",
                [self.module_id, self.data_entry_type, self.job.pk],
            )
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
        chunk = jobs.enqueue(
            RECALC,
            {**scope.payload(), "chunk_of": self.job.pk},
            pipeline=self.job.pipeline_id,
            tenant=self.job.tenant_id,
            created_by=self.job.created_by_id,
        )
        LoadChunk.objects.create(load_id=self.job.pk, job_id=chunk.pk, after=self.after, upto=upto)
        self.after, self.pending = upto, 0
        self.queued += 1


def chunk_jobs(ingest_id: int) -> list[int]:
    """The recalculation jobs of every chunk an ingest queued, over all its attempts."""
    return list(
        LoadChunk.objects.filter(load_id=ingest_id).order_by("after").values_list("job_id", flat=True)
    )


def closing_payload(scope: Scope, ingest: jobs.Job) -> dict[str, object]:
    """The payload of the recalculation an ingest chains when it succeeds."""
    return {**scope.payload(), "closes": ingest.pk}


def closing_scope(ctx: jobs.JobContext, scope: Scope) -> Scope:
    """What the closing recalculation running in ``ctx`` must still cover, once the
    chunks it waited on have all finished: from the first id that no succeeded chunk
    covers."""
    chunks = [job for job in ctx.prerequisites() if job.type == RECALC]
    left = [Scope.from_payload(job.payload) for job in chunks if not job.succeeded]
    if left:
        after = min(chunk.after for chunk in left)
    else:
        after = max((Scope.from_payload(job.payload).upto or 0 for job in chunks), default=0)
    return Scope(scope.data_entry_type, scope.module_id, scope.years, after=after)
