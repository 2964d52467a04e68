"""A bulk ingest is all or nothing for readers.

An ingest's rows go into the entries table as they are loaded, batch by batch, but as a
*load* (``EntryLoad``, keyed by the ingest job) that no reader sees: the report's stats,
the API, the admin and interactive edits read manual entries and the rows of *current*
loads only. The ingest's closing recalculation, once every row of the load has its
emission, makes the load current and the module's previous load of the same type and
source *replaced*, and queues the module's aggregation, in one short transaction; it
then deletes the replaced rows in batches. The latest upload wins: a load whose module
already reads a later ingest's load is superseded instead of made current.

So a killed worker, a failed or cancelled ingest, or a closing recalculation that fails
for good, leaves the previous entries and stats exactly as they were. The rows of a load
that will never become current are deleted by retention (``prune``) once every job of
its pipeline has been finished for ``FACTORS_ABANDONED_LOAD_HOURS``: until then an
operator's retry of the failed job resumes the load where it stopped.

Locks, in the order of ``factors.locks``: the module first, then the load row. The
switch and the deletions hold the module's lock, so no recalculation batch is between
its read of an entry and the emission it writes for it when the entry goes. An ingest
starting (``begin``) locks only its load row, which retention locks before it deletes a
load's rows: a retried ingest either finds its rows whole or finds none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction

import jobs
from factors import locks
from factors.models import EntryLoad

logger = logging.getLogger(__name__)

#: Rows of a replaced load deleted per transaction.
DELETE_BATCH_ROWS = 20_000

#: ``DataEntry.objects.current()`` in SQL, for the entries ``d`` of the module given as
#: ``%(module)s``: the module's current loads are read once (an InitPlan), not per row.
CURRENT_IN_MODULE = (
    "(d.job_id IS NULL OR d.job_id = ANY(ARRAY(SELECT l.job_id "
    "FROM factors_entryload l WHERE l.module_id = %(module)s "
    "AND l.state = 'current')))"
)


def begin(ctx: jobs.JobContext, module_id: int, data_entry_type: str, source: str) -> None:
    """Open the load of an ingest attempt, or resume its own; refuses a load that was
    already made current (the ingest's rows are read: writing more would change them)."""
    job_id = ctx.job.pk
    with ctx.batch(relaxed=False):
        load, _ = EntryLoad.objects.select_for_update().get_or_create(
            job_id=job_id,
            defaults={"module_id": module_id, "data_entry_type": data_entry_type, "source": source},
        )
        if load.state != EntryLoad.State.LOADING:
            raise jobs.PermanentError(
                f"the rows of job {job_id} are already {load.state}; "
                "an ingest never writes into a load that is read"
            )


@dataclass(frozen=True)
class Switch:
    """What the switch did: made the load current, or found a later upload's load
    current already (the load is then superseded, and replaced at once)."""

    load: EntryLoad
    replaced: int  # rows of replaced loads deleted
    superseded_by: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        if self.load.state == EntryLoad.State.REPLACED:
            return {"superseded_by": self.superseded_by, "replaced": self.replaced}
        return {"made_current": self.load.job_id, "replaced": self.replaced}


def make_current(
    ctx: jobs.JobContext, ingest_id: int, *, module_id: int | None, on_switch: Callable[[int], None]
) -> Switch:
    """Make the load of ``ingest_id`` the one readers see, then delete the rows it
    replaces. ``ctx`` is the closing recalculation's (each transaction fenced by its
    lease); the load must be of ``module_id``, the module that job was checked to cover.

    The latest upload wins, whichever closing recalculation ends first: a load whose
    module already reads a later ingest's load is superseded instead. ``on_switch``
    (given the module id) runs in the switching transaction: the caller queues the
    module's aggregation there, so the stats follow the entries even if this job fails
    afterwards. Idempotent: a retry finds the switch done and finishes the deletions.
    """
    with ctx.batch(relaxed=False):
        found = EntryLoad.objects.filter(job_id=ingest_id).values_list("module_id", flat=True).first()
        if found is not None and found == module_id:
            locks.lock_module(found)
        load = EntryLoad.objects.select_for_update().filter(job_id=ingest_id).first()
        if load is None or load.module_id != module_id:
            raise jobs.PermanentError(
                f"no rows of ingest {ingest_id} in module {module_id} (a "
                "failed ingest's rows are removed after a while): upload "
                "the file again"
            )
        same = EntryLoad.objects.filter(
            module_id=load.module_id, data_entry_type=load.data_entry_type, source=load.source
        )
        current = same.select_for_update().filter(state=EntryLoad.State.CURRENT).first()
        if load.state == EntryLoad.State.LOADING:
            now = jobs.now()
            if current is not None and current.job_id > load.job_id:
                load.state, load.replaced_at = EntryLoad.State.REPLACED, now
                load.save(update_fields=["state", "replaced_at"])
            else:
                if current is not None:
                    current.state, current.replaced_at = EntryLoad.State.REPLACED, now
                    current.save(update_fields=["state", "replaced_at"])
                    current = None
                load.state, load.current_since = EntryLoad.State.CURRENT, now
                load.save(update_fields=["state", "current_since"])
                on_switch(load.module_id)
    replaced = list(same.filter(state=EntryLoad.State.REPLACED).values_list("job_id", flat=True))
    deleted = sum(_delete_replaced(job_id, fence=ctx) for job_id in replaced)
    superseded_by = current.job_id if current is not None and current.job_id != load.job_id else None
    return Switch(load, deleted, superseded_by)


def _delete_rows(load: EntryLoad, limit: int | None = None) -> int:
    """Delete rows of a load, at most ``limit`` of them; returns how many."""
    return delete_rows(load.module_id, load.data_entry_type, load.job_id, limit)


def delete_rows(module_id: int, data_entry_type: str, job_id: int, limit: int | None = None) -> int:
    """Delete the rows one ingest job wrote into a module's entries of a type (their
    emissions go with them: the cascade of migration 0002), at most ``limit`` of them;
    returns how many. The caller holds the module's lock."""
    rows = "module_id = %(module)s AND data_entry_type = %(type)s AND job_id = %(job)s"
    if limit is not None:
        rows += f" AND id IN (SELECT id FROM factors_dataentry WHERE {rows} LIMIT {int(limit)})"
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM factors_dataentry WHERE {rows}",
            {"module": module_id, "type": data_entry_type, "job": job_id},
        )
        return cursor.rowcount


def _locked_load(job_id: int) -> EntryLoad | None:
    """A load, locked after its module (the order of ``factors.locks``)."""
    module_id = EntryLoad.objects.filter(job_id=job_id).values_list("module_id", flat=True).first()
    if module_id is None:
        return None
    locks.lock_module(module_id)
    return EntryLoad.objects.select_for_update().filter(job_id=job_id).first()


def _delete_replaced(job_id: int, *, fence: jobs.JobContext | None = None) -> int:
    """Delete a replaced load's rows, then the load, in batches of ``DELETE_BATCH_ROWS``:
    each batch is a short transaction under the module's lock, so an edit or an
    aggregation of the module waits for one batch, not for the whole deletion. Nothing
    reads a replaced load, and nothing brings it back, so a crash between batches just
    leaves the rest to the next attempt or to retention. ``fence``: the context of the job
    deleting them, whose lease each batch holds."""
    deleted = 0
    while True:
        with fence.batch(relaxed=False) if fence is not None else transaction.atomic():
            load = _locked_load(job_id)
            if load is None or load.state != EntryLoad.State.REPLACED:
                return deleted
            batch = _delete_rows(load, DELETE_BATCH_ROWS)
            if batch < DELETE_BATCH_ROWS:
                load.delete()
        deleted += batch
        if batch < DELETE_BATCH_ROWS:
            return deleted


def _delete_abandoned(job_id: int, cutoff: datetime) -> int | None:
    """Delete the rows of a load that will never become current, and the load, in one
    transaction: an operator's retry of its ingest must find either all of its rows or
    none (``begin`` waits for this lock). None when the load is not abandoned after all
    (a retry started, or it became current)."""
    with transaction.atomic():
        load = _locked_load(job_id)
        if load is None or load.state != EntryLoad.State.LOADING or not _abandoned(job_id, cutoff):
            return None
        deleted = _delete_rows(load)
        load.delete()
    return deleted


# --- retention -------------------------------------------------------------------------------------


def _abandoned(job_id: int, cutoff: datetime) -> bool:
    """Whether a loading load will never become current: every job of its ingest's
    pipeline finished before ``cutoff`` (or the ingest job is pruned)."""
    return job_id in jobs.pipelines_over([job_id], before=cutoff)


@dataclass(frozen=True)
class Pruned:
    loads: int
    rows: int

    def as_dict(self) -> dict[str, int]:
        return {"loads": self.loads, "rows": self.rows}


def removable(*, older_than: timedelta) -> list[int]:
    """Loads whose rows nobody will read: replaced ones, and loading ones whose pipeline
    has been over for ``older_than`` (a failed or cancelled ingest, or one whose closing
    recalculation failed)."""
    cutoff = jobs.now() - older_than
    candidates = list(EntryLoad.objects.exclude(state=EntryLoad.State.CURRENT).values_list("job_id", "state"))
    over = jobs.pipelines_over(
        [job_id for job_id, state in candidates if state == EntryLoad.State.LOADING], before=cutoff
    )
    return sorted(
        job_id for job_id, state in candidates if state == EntryLoad.State.REPLACED or job_id in over
    )


def prune(*, older_than: timedelta, only: list[int] | None = None) -> Pruned:
    """Delete the rows of every removable load (of ``only``, if given), one load per
    transaction. Each deletion checks again, under the load's lock, that the load is
    still removable, so a retry that has just started is never cut short."""
    cutoff = jobs.now() - older_than
    wanted = None if only is None else set(only)
    loads = rows = 0
    for job_id in removable(older_than=older_than):
        if wanted is not None and job_id not in wanted:
            continue
        state = EntryLoad.objects.filter(job_id=job_id).values_list("state", flat=True).first()
        if state == EntryLoad.State.REPLACED:
            deleted: int | None = _delete_replaced(job_id)
        else:
            deleted = _delete_abandoned(job_id, cutoff)
        if deleted is None:
            continue
        loads, rows = loads + 1, rows + deleted
        logger.info(
            "entry load of job %s removed with %s rows",
            job_id,
            deleted,
            extra={"job": job_id, "rows": deleted},
        )
    return Pruned(loads, rows)
