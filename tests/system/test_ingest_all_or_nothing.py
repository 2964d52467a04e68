"""A bulk ingest is all or nothing for readers, with real workers SIGKILLed in it.

A module's entries come from a first, small upload. A second, larger one is loaded by
worker processes that are killed in the middle of a batch, after earlier batches of
their attempt committed, and (when the ingest succeeds) in the middle of the closing
recalculation's switch, after it marked the loads but before it committed. After every
kill the table holds the second upload's rows, and every reader (the entries readers
see, the API's listing, the aggregation's sums, the module's stats) sees the first
upload only. The second upload is then either abandoned (failed for good, or
cancelled), and retention removes its rows and nothing else; or a worker finishes it,
and readers see each of its rows once and none of the first upload's.

Where a worker stops is decided by locks held from here, not by timing: a table lock
stops the next batch's COPY (each release lets exactly the batch that waited commit),
and row locks stop the switch.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from factors import aggregation, entry_loads, services, stats
from factors.models import DataEntry, EntryLoad, ReportModule
from jobs import engine
from jobs.models import Job
from jobs.notify import raw_connection
from jobs.testing import wait_until
from jobs.worker import run_until_idle
from tests.support.base import as_user, staff, tenant
from tests.support.factors.builders import (
    PLANE_FACTORS,
    csv_bytes,
    dispatch,
    expected_totals,
    module,
    plane_factors,
    plane_rows,
    report,
)
from tests.support.processes import Proc, Processes

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

# Short leases, so that a killed worker's job is rescued within seconds; chunks of two
# batches, so that chunk recalculations are queued (and run) between the kills.
FAST = {
    "JOBS_LEASE_SECONDS": "2",
    "JOBS_HEARTBEAT_SECONDS": "0.5",
    "JOBS_REAPER_SECONDS": "0.5",
    "FACTORS_RECALC_CHUNK_ROWS": "10000",
}
BATCH = 5_000  # the default FACTORS_INGEST_BATCH_ROWS
FIRST = 300  # fewer than an API page (500): the listing shows all that readers see
SECOND = 40_000
HEADER = ["quantity", "unit", "haul", "cabin"]


@pytest.fixture
def upload_dir(tmp_path, settings):
    """Staged uploads in the test's own directory, which the workers are told about."""
    settings.INTAKE_STAGING_URL = str(tmp_path / "staging")
    return tmp_path / "staging" / "factors"


# --- where the workers are ---------------------------------------------------------------------


def waiting(query_prefix: str) -> bool:
    """Some session waits on a lock in a statement that starts with ``query_prefix``."""
    conn = raw_connection()
    try:
        return bool(
            conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE %s",
                [query_prefix + "%"],
            ).fetchone()
        )
    finally:
        conn.close()


def switch_uncommitted() -> bool:
    """The session waiting in ``hold_lease`` has written to the loads table in its open
    transaction: it marked the loads, and has not committed."""
    conn = raw_connection()
    try:
        return bool(
            conn.execute(
                "SELECT 1 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
                "WHERE a.datname = current_database() AND a.wait_event_type = 'Lock' "
                "AND a.query LIKE 'SELECT 1 FROM jobs_job%%' AND l.granted "
                "AND l.relation = 'factors_entryload'::regclass AND l.mode = 'RowExclusiveLock'"
            ).fetchone()
        )
    finally:
        conn.close()


def in_copy() -> bool:
    return waiting("COPY factors_dataentry")


class Gate:
    """A connection of our own whose transaction holds the locks that stop a worker."""

    def __init__(self) -> None:
        self.conn = raw_connection()
        self.open = False

    def hold(self, *statements: tuple[str, list[Any]]) -> None:
        self.release()
        self.conn.execute("BEGIN")
        self.open = True
        for sql, params in statements:
            self.conn.execute(sql, params)

    def hold_entries(self) -> None:
        """Stop the next batch in its COPY (the lock conflicts with its inserts only)."""
        self.hold(("LOCK TABLE factors_dataentry IN SHARE ROW EXCLUSIVE MODE", []))

    def release(self) -> None:
        if self.open:
            self.conn.execute("ROLLBACK")
            self.open = False

    def close(self) -> None:
        self.release()
        self.conn.close()


@pytest.fixture
def gates() -> Iterator[list[Gate]]:
    opened: list[Gate] = []
    try:
        yield opened
    finally:
        for gate in opened:
            gate.close()


def loaded(job: Job) -> int:
    return DataEntry.objects.filter(job=job).count()


def let_batches_through(gate: Gate, job: Job, batches: int) -> int:
    """The worker waits in a batch's COPY behind ``gate``: let ``batches`` more batches
    commit, then hold it again inside the next one. Returns the job's rows in the table."""
    wait_until(in_copy, 30, "the worker to wait inside a batch")
    for _ in range(batches):
        before = loaded(job)
        gate.hold_entries()  # waits for the batch that was waiting to commit
        wait_until(in_copy, 30, "the worker to wait inside the next batch")
        assert loaded(job) > before
    return loaded(job)


def kill(victim: Proc, gate: Gate) -> None:
    """SIGKILL the worker's process group while it waits behind the gate; then open the
    gate, and wait for the killed worker's sessions to end."""
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(10)
    gate.release()
    wait_until(lambda: not waiting(""), 10, "the killed worker's sessions to end")


def start_worker(procs: Processes, name: str) -> Proc:
    return procs.manage(name, "jobs_worker", env=procs.env(**FAST))


# --- what readers see --------------------------------------------------------------------------


def totals(rows: list[list[str]]) -> tuple[int, str, int]:
    count, _quantity, kg, missing = expected_totals(rows, PLANE_FACTORS)
    return count, stats.amount(kg), missing


def summed(travel: ReportModule) -> tuple[int, str, int]:
    """The aggregation's sums for the module, as its stats would be written."""
    (plane,) = aggregation.module_totals(travel.pk)
    return plane.entries, stats.amount(plane.kg_co2e), plane.without_factor


def read_stats(travel: ReportModule) -> dict[str, Any]:
    travel.refresh_from_db()
    return travel.stats


def listed_ids(client: Any, travel: ReportModule) -> tuple[set[int], bool]:
    """The ids on the API's first page of the module's entries, and whether more follow."""
    base = f"/v1/carbon_reports/{travel.report_id}/modules/travel/data-entries"
    response = client.get(base, {"page_size": 500})
    assert response.status_code == 200
    page = response.json()
    return {row["id"] for row in page["results"]}, page["next"] is not None


class FirstUpload:
    """The module's entries from a first, successful upload, and what readers saw then."""

    def __init__(self, travel: ReportModule, rows: list[list[str]]) -> None:
        self.travel = travel
        self.totals = totals(rows)
        self.job = dispatch(travel, csv_bytes(HEADER, rows)).job
        run_until_idle()
        self.job.refresh_from_db()
        assert self.job.state == Job.State.SUCCEEDED
        self.ids = set(DataEntry.objects.filter(job=self.job).values_list("pk", flat=True))
        self.stats = read_stats(travel)
        self.client = as_user(staff("tess", of=tenant("Acme")))
        assert len(self.ids) == FIRST and summed(travel) == self.totals
        assert (self.stats["entries"], self.stats["kg_co2e"], self.stats["without_factor"]) == self.totals

    def is_all_readers_see(self, second: Job) -> None:
        """Whatever of ``second`` is in the table, no reader sees any of it."""
        travel = self.travel
        current = set(DataEntry.objects.current().filter(module=travel).values_list("pk", flat=True))
        assert current == self.ids
        assert listed_ids(self.client, travel) == (self.ids, False)
        assert summed(travel) == self.totals
        assert read_stats(travel) == self.stats
        assert set(DataEntry.objects.filter(job=self.job).values_list("pk", flat=True)) == self.ids
        assert EntryLoad.objects.get(job=self.job).state == EntryLoad.State.CURRENT
        assert EntryLoad.objects.get(job=second).state == EntryLoad.State.LOADING


@pytest.fixture
def first(upload_dir) -> FirstUpload:
    plane_factors()
    travel = module(report(tenant=tenant("Acme")))
    return FirstUpload(travel, plane_rows(FIRST))


def pipeline_over(job: Job) -> bool:
    return not Job.objects.filter(pipeline_id=job.pipeline_id, state__in=Job.UNFINISHED).exists()


# --- an abandoned upload ------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["failed", "cancelled"])
def test_an_abandoned_upload_is_never_read_and_retention_removes_only_its_rows(
    processes, gates, first, ending
):
    gate = Gate()
    gates.append(gate)
    second = dispatch(first.travel, csv_bytes(HEADER, plane_rows(SECOND, start=FIRST))).job
    Job.objects.filter(pk=second.pk).update(max_attempts=2)

    # Attempt 1: killed inside its third batch, two batches committed.
    gate.hold_entries()
    victim = start_worker(processes, "attempt-1")
    in_table = let_batches_through(gate, second, 2)
    kill(victim, gate)
    assert 0 < in_table == loaded(second) < SECOND and in_table % BATCH == 0
    first.is_all_readers_see(second)

    # Attempt 2 resumes after the rescue and is stopped inside its second batch.
    gate.hold_entries()
    victim = start_worker(processes, "attempt-2")
    resumed = let_batches_through(gate, second, 1)
    assert in_table < resumed < SECOND
    if ending == "failed":
        kill(victim, gate)  # its last attempt: the reaper fails it
        first.is_all_readers_see(second)
        start_worker(processes, "reaper")
    else:
        engine.cancel(second, reason="the wrong file")
        gate.release()  # the waiting batch finds its lease gone and rolls back
    wait_until(lambda: pipeline_over(second), 30, "the second upload's pipeline to end")
    second.refresh_from_db()
    assert second.state == (Job.State.FAILED if ending == "failed" else Job.State.CANCELLED)
    assert not Job.objects.filter(pipeline_id=second.pipeline_id, payload__has_key="closes").exists()

    partial = loaded(second)
    assert partial == resumed  # in the table, never read
    first.is_all_readers_see(second)
    services.recompute_stats([first.travel.report_id])  # the report asks for fresh stats
    wait_until(
        lambda: not Job.objects.filter(type="factors.aggregation", state__in=Job.UNFINISHED).exists(),
        30,
        "the aggregations",
    )
    first.is_all_readers_see(second)

    # Retention: the second load goes, rows and all; the first stays as it was.
    assert entry_loads.removable(older_than=timedelta(0)) == [second.pk]
    if ending == "failed":
        pruned = entry_loads.prune(older_than=timedelta(0)).as_dict()
        assert pruned == {"loads": 1, "rows": partial}
    else:
        out = StringIO()
        call_command("factors_prune_loads", "--hours", "0", stdout=out)
        assert f"Removed 1 load(s), {partial} row(s)." in out.getvalue()
    assert loaded(second) == 0 and not EntryLoad.objects.filter(job=second).exists()
    assert set(DataEntry.objects.filter(module=first.travel).values_list("pk", flat=True)) == first.ids
    assert (
        set(DataEntry.objects.current().filter(module=first.travel).values_list("pk", flat=True)) == first.ids
    )
    assert listed_ids(first.client, first.travel) == (first.ids, False)
    assert summed(first.travel) == first.totals and read_stats(first.travel) == first.stats


# --- an upload that gets through -----------------------------------------------------------------


def test_an_upload_killed_while_loading_and_while_switching_is_read_whole_once_done(processes, gates, first):
    entries, load_row, job_row = Gate(), Gate(), Gate()
    gates.extend([entries, load_row, job_row])
    rows = plane_rows(SECOND, start=FIRST)
    second = dispatch(first.travel, csv_bytes(HEADER, rows)).job

    # Attempts 1 and 2: each killed inside a batch, after one or two of its own committed.
    in_table = 0
    for attempt, batches in ((1, 2), (2, 1)):
        entries.hold_entries()
        victim = start_worker(processes, f"attempt-{attempt}")
        now_in_table = let_batches_through(entries, second, batches)
        kill(victim, entries)
        assert in_table < now_in_table == loaded(second) < SECOND
        in_table = now_in_table
        first.is_all_readers_see(second)

    # Attempt 3 loads the rest and succeeds. Its closing recalculation prices every row,
    # then is stopped in the switch: it has marked the second load current and the first
    # replaced, and waits on its own job row to commit. Killed there.
    entries.hold_entries()
    victim = start_worker(processes, "attempt-3")
    wait_until(in_copy, 30, "the third attempt to wait inside a batch")  # the load exists
    # NO KEY UPDATE: it stops the switch's FOR UPDATE, not the batches that record a
    # chunk of the load (their foreign key takes KEY SHARE on the row).
    load_row.hold(("SELECT 1 FROM factors_entryload WHERE job_id = %s FOR NO KEY UPDATE", [second.pk]))
    entries.release()
    wait_until(
        lambda: waiting('SELECT "factors_entryload"'), 60, "the closing recalculation to reach the switch"
    )
    second.refresh_from_db()
    assert second.state == Job.State.SUCCEEDED and second.result["resumed_from"] == in_table
    closing = Job.objects.get(pipeline_id=second.pipeline_id, payload__closes=second.pk)
    assert closing.state == Job.State.RUNNING
    job_row.hold(("SELECT 1 FROM jobs_job WHERE id = %s FOR NO KEY UPDATE", [closing.pk]))
    load_row.release()
    wait_until(lambda: waiting("SELECT 1 FROM jobs_job"), 30, "the switch to wait for its commit")
    assert switch_uncommitted() and loaded(second) == SECOND
    kill(victim, job_row)
    first.is_all_readers_see(second)

    # A worker carries on: the closing recalculation is rescued and switches.
    start_worker(processes, "rescuer")
    wait_until(lambda: pipeline_over(second), 60, "the pipeline to finish")
    closing.refresh_from_db()
    assert closing.state == Job.State.SUCCEEDED and closing.rescues == 1
    assert closing.result["made_current"] == second.pk and closing.result["replaced"] == FIRST
    aggregated = Job.objects.get(pipeline_id=second.pipeline_id, type="factors.aggregation")
    assert aggregated.state == Job.State.SUCCEEDED

    travel = first.travel
    numbers = list(DataEntry.objects.current().filter(module=travel).values_list("row_number", flat=True))
    assert sorted(numbers) == list(range(2, SECOND + 2))  # each row once, none missing
    assert not DataEntry.objects.filter(job=first.job).exists()
    assert not DataEntry.objects.filter(module=travel).exclude(job=second).exists()
    assert not EntryLoad.objects.filter(job=first.job).exists()
    assert EntryLoad.objects.get(job=second).state == EntryLoad.State.CURRENT
    listed, more = listed_ids(first.client, travel)
    assert more and listed <= set(DataEntry.objects.filter(job=second).values_list("pk", flat=True))
    expected = totals(rows)
    assert summed(travel) == expected
    found = read_stats(travel)
    assert (found["entries"], found["kg_co2e"], found["without_factor"]) == expected
