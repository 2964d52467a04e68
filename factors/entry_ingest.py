"""Loading a staged upload into data entries: ``COPY`` in batches, exactly once.

Each batch of 1,000–5,000 staged rows is one transaction and one ``COPY … FROM STDIN``
straight into the entries table: the rows are turned into COPY's text format here (a
module, type and year per batch, the classification as JSON, the row number), so
PostgreSQL inserts them as a bulk load, with no staging table and no ``INSERT …
SELECT`` between. Entries are written in file order and a batch commits whole, so after
a crash the rows of the job already in the table are exactly rows 1..n of the file: the
next attempt counts them and carries on from row n + 1. Batches are fenced
(``ctx.batch()``), so a stale attempt cannot keep writing beside its successor, and
commit without waiting for the disk. Every ``RECALC_CHUNK_ROWS`` rows, a batch also
queues the recalculation of the rows loaded so far (``factors.recalc_chunks``).

The rows are loaded as the ingest's *load*, which no reader sees until the ingest's
closing recalculation makes it current and replaces the module's earlier entries of the
same source and type (``factors.entry_loads``): a failed, cancelled or half-done upload
leaves the module's entries and stats as they were.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Any

from django.db import connection

import jobs
from factors import catalog, conf, entry_loads, locks
from factors.recalc_chunks import ChunkQueue
from factors.staging import StagedUpload

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """Where an ingest writes: one module, data-entry type and year, from one source."""

    module_id: int
    data_entry_type: str
    year: int
    source: str

    def payload(self) -> dict[str, Any]:
        return {
            "module": self.module_id,
            "data_entry_type": self.data_entry_type,
            "year": self.year,
            "source": self.source,
        }

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> Target:
        return cls(int(data["module"]), data["data_entry_type"], int(data["year"]), data["source"])


@dataclass
class LoadResult:
    rows: int
    loaded: int
    resumed_from: int

    def as_dict(self) -> dict[str, int]:
        return {"rows": self.rows, "loaded": self.loaded, "resumed_from": self.resumed_from}


def committed_rows(job_id: int, target: Target) -> int:
    """How many rows of job ``job_id`` are in the table (they are its first rows, see
    above)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), coalesce(max(row_number), 0), coalesce(min(row_number), 0) "
            "FROM factors_dataentry WHERE module_id = %s AND data_entry_type = %s "
            "AND job_id = %s",
            [target.module_id, target.data_entry_type, job_id],
        )
        count, last, first = cursor.fetchone()
    if count and last - first + 1 != count:
        raise jobs.PermanentError(
            f"entries of job {job_id} are not a run of rows ({count} rows between {first} and {last})"
        )
    return count


def load(ctx: jobs.JobContext, target: Target, upload: StagedUpload, *, first_row: int) -> LoadResult:
    """Insert the staged rows not yet in the table; ``first_row`` numbers the first one
    (2 for a CSV file, whose row 1 is the header). Queues the recalculation of each
    chunk of loaded rows as it goes (``factors.recalc_chunks``)."""
    entry_loads.begin(ctx, target.module_id, target.data_entry_type, target.source)
    done = committed_rows(ctx.job.pk, target)
    result = LoadResult(rows=upload.rows, loaded=0, resumed_from=done)
    if done >= upload.rows:
        return result
    if not upload.exists():
        raise jobs.PermanentError(
            f"the staged upload {upload.path} is gone with {done} of "
            f"{upload.rows} rows loaded: upload the file again"
        )
    rows = CopyRows(ctx.job.pk, target, upload.columns)
    batch_rows = conf.ingest_batch_rows()
    chunks = ChunkQueue(ctx.job, target.module_id, target.data_entry_type)
    chunks.start()
    with upload.open() as handle:
        deque(islice(handle, done), maxlen=0)  # skip the rows already loaded
        while lines := list(islice(handle, batch_rows)):
            with ctx.batch():
                _copy(rows.format(lines, first_row + done))
                chunks.batch_loaded(len(lines))
            done += len(lines)
            result.loaded += len(lines)
            ctx.progress(done, upload.rows, f"{done:,} of {upload.rows:,} rows loaded")
    return result


def forget_partial(ctx: jobs.JobContext, target: Target) -> int:
    """Delete the rows an earlier attempt of the job loaded (a source that may change
    between attempts is loaded again whole). They were never read: the load is not
    current yet."""
    with ctx.batch(relaxed=False):
        locks.lock_module(target.module_id)
        return entry_loads.delete_rows(target.module_id, target.data_entry_type, ctx.job.pk)


COPY_COLUMNS = (
    "row_number",
    "module_id",
    "data_entry_type",
    "year",
    "quantity",
    "unit",
    "classification",
    "source",
    "job_id",
)  # created_at, updated_at: now()


class CopyRows:
    """Staged CSV rows as rows of COPY's text format for ``factors_dataentry``.

    The validator guarantees what makes this safe without escaping or parsing: staged
    entry rows are plain (quantities are decimals and classification values are codes:
    letters, digits, ``_ - .``, spaces), so no cell holds a comma, a tab, a backslash, a
    quote or a line break. One f-string per row: the cheapest way Python has to do it.
    """

    def __init__(self, job_id: int, target: Target, columns: tuple[str, ...]) -> None:
        spec = catalog.spec(target.data_entry_type)
        self.head = f"{target.module_id}\t{target.data_entry_type}\t{target.year}\t"
        self.middle = f"\t{spec.unit}\t"
        self.tail = f"\t{target.source}\t{job_id}\n"
        self.quantity = columns.index("quantity")
        self.keys = [(key, columns.index(key)) for key in spec.keys]

    def format(self, lines: list[bytes], first_row: int) -> bytes:
        data = b"".join(lines)
        if b'"' in data:
            raise jobs.PermanentError("the staged upload is not in canonical form (a quote)")
        head, middle, tail, q = self.head, self.middle, self.tail, self.quantity
        (k0, i0), *more = self.keys
        rows = enumerate(data.decode().lower().splitlines(), first_row)  # codes: lower case
        if not more:
            return "".join(
                f'{n}\t{head}{c[q]}{middle}{{"{k0}": "{c[i0]}"}}{tail}'
                for n, c in ((n, line.split(",")) for n, line in rows)
            ).encode()
        ((k1, i1),) = more
        return "".join(
            f'{n}\t{head}{c[q]}{middle}{{"{k0}": "{c[i0]}", "{k1}": "{c[i1]}"}}{tail}'
            for n, c in ((n, line.split(",")) for n, line in rows)
        ).encode()


def _copy(rows: bytes) -> None:
    with connection.cursor() as cursor:
        statement = f"COPY factors_dataentry ({', '.join(COPY_COLUMNS)}) FROM STDIN"
        with cursor.copy(statement) as copy:
            copy.write(rows)
