"""The row locks that keep stats right while bulk jobs and interactive edits overlap.

Every writer of a module's entries, emissions or stats takes its module's row lock
first (then, if it writes report stats, the report's), always in that order and modules
by id, so no two writers wait on each other in a cycle:

- an interactive edit and the aggregation job take ``FOR NO KEY UPDATE``: they read
  totals and write stats, one at a time per module;
- each batch of the recalculation takes ``FOR SHARE`` on the modules of its entries:
  several recalculations share a module, but never with an edit or an aggregation;
- making an ingest's load current, and deleting the rows of a load that is replaced or
  abandoned (``factors.entry_loads``), take ``FOR NO KEY UPDATE``, so no recalculation
  batch is between its read of an entry and the insert that references it when the
  entry goes, and no aggregation sums while the module's entries change sides.

Why this makes stats right: the aggregation recomputes a module's stats in one
transaction that holds the lock from before its sums until its commit. A recalculation
batch commits either before (the sums include it) or after that commit; in the second
case the aggregation job is finished when the recalculation chains the next one, so the
next one is enqueued rather than deduplicated into it. Interactive edits add deltas to
stats under the same lock, so they never interleave with a recompute.

``FOR NO KEY UPDATE`` rather than ``FOR UPDATE``: inserting entries takes ``FOR KEY
SHARE`` on their module (the foreign key check), and ingests must not wait for edits.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from factors.models import CarbonReport, ReportModule


def lock_module(module_id: int) -> ReportModule:
    """Lock a module for an edit, an aggregation or an ingest's replace; return it."""
    return ReportModule.objects.select_for_update(no_key=True).get(pk=module_id)


def lock_report(report_id: int) -> CarbonReport:
    return CarbonReport.objects.select_for_update(no_key=True).get(pk=report_id)


def share_modules(module_ids: Iterable[int]) -> None:
    """Share-lock modules (a recalculation batch), by id to keep one global order."""
    ids = sorted(set(module_ids))
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM factors_reportmodule WHERE id = ANY(%s) ORDER BY id FOR SHARE", [ids])
