"""Fencing for the batched handlers.

A handler declared ``atomic=False`` commits its own batches, outside the transaction in
which the engine records its outcome. If its worker stalls past the lease, the reaper
hands the job to another worker while the first one may still be writing: two writers
of one job. Each batch transaction therefore ends with ``hold_lease``, just before its
commit: it share-locks the job row if the attempt's lease token is still current. A
rescue, cancel or recovery (an UPDATE of that row) that comes later waits for the
commit; one that came earlier makes the check fail, the batch roll back and the stale
attempt stop with ``LeaseLost``. Either way the next attempt, which counts what is
already written when it starts, never overlaps a batch of the stale one.

The lock is taken last, not first, so that it lasts only for the commit: held through a
whole batch it would also hold up the worker's own progress writes to that row, and
with them its heartbeat.

The engine offers this for atomic handlers only (their writes commit with the outcome),
so the CO2 calculator does it here with a plain read of the job row.
"""

from __future__ import annotations

from django.db import connection

import jobs
from jobs.models import Job


def hold_lease(job: Job) -> None:
    """Raise ``jobs.LeaseLost`` unless ``job`` still runs under this attempt's lease;
    otherwise keep it that way until the caller's transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM jobs_job WHERE id = %s AND state = 'running' "
                       "AND lease_token = %s FOR SHARE", [job.pk, job.lease_token])
        if cursor.fetchone() is None:
            raise jobs.LeaseLost(f"job {job.pk}: lease {job.lease_token} is no longer current; "
                                 "batch refused")


def relax_commit() -> None:
    """Let this batch transaction commit without waiting for its log to reach the disk.

    Safe for batches because they are idempotent and belong to a job whose outcome is
    committed synchronously later, which flushes the log up to and past them. A database
    crash before that loses only batches of an attempt that never succeeded; its next
    attempt, counting what is in the tables, writes them again. Saves a disk flush per
    batch, hundreds in a large upload.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO off")
