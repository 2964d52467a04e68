"""Bulk entries written before entry loads existed are given loads by migration 0008: the
latest finished ingest per module, type and source is read; a failed one's leftovers,
and an unfinished one's rows, are not."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from factors.models import DataEntry, EntryLoad
from jobs import engine
from jobs.models import Job
from tests.support.factors.builders import module, report

BEFORE = [("factors", "0007_upload_payloads_by_id")]


def ingest(state: str) -> int:
    job = engine.enqueue("tests.noop", {})
    finished = timezone.now() if state in ("succeeded", "failed") else None
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=finished)
    return job.pk


def rows(module_id: int, job_id: int, source: str, n: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO factors_dataentry (module_id, data_entry_type, year, quantity, unit, "
            "classification, source, job_id, row_number) SELECT %s, 'plane', 2024, 1, 'km', "
            '\'{"haul": "short", "cabin": "economy"}\', %s, %s, g FROM generate_series(1, %s) g',
            [module_id, source, job_id, n],
        )


@pytest.mark.django_db(transaction=True)
def test_existing_bulk_rows_are_read_only_when_their_ingest_finished_last():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    travel = module(report())
    older, latest, failed, waiting = (
        ingest("succeeded"),
        ingest("succeeded"),
        ingest("failed"),
        ingest("pending"),
    )
    pruned = waiting + 1_000  # an api ingest whose job was pruned long ago
    for job_id, n in [(older, 2), (latest, 3), (failed, 4), (waiting, 5)]:
        rows(travel.pk, job_id, "csv", n)
    rows(travel.pk, pruned, "api", 6)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO factors_dataentry (module_id, data_entry_type, year, quantity, "
            "unit, classification, source) VALUES (%s, 'plane', 2024, 1, 'km', "
            '\'{"haul": "short", "cabin": "economy"}\', \'manual\')',
            [travel.pk],
        )

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    states = dict(EntryLoad.objects.values_list("job_id", "state"))
    assert states == {
        older: "replaced",
        latest: "current",
        failed: "loading",
        waiting: "loading",
        pruned: "current",
    }
    read = DataEntry.objects.current().filter(module=travel)
    assert read.count() == 1 + 3 + 6
    assert set(read.values_list("source", flat=True)) == {"manual", "csv", "api"}
