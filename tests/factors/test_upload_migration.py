"""Jobs enqueued with the old upload payload (an object with its path) are given the
upload's id and an ``Upload`` row by migration 0007, so that they still find their file."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from factors.models import Upload
from jobs import engine
from tests.support.base import tenant

BEFORE = [("factors", "0006_uploads_named_by_id")]


@pytest.mark.django_db(transaction=True)
def test_old_upload_payloads_become_ids_with_their_upload_rows(settings, tmp_path):
    settings.FACTORS_UPLOAD_DIR = str(tmp_path)
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    acme = tenant("Acme")
    kept, gone = uuid.uuid4().hex, uuid.uuid4().hex
    (tmp_path / f"{kept}.csv").write_text("12.5,km,short,economy\n")
    old = {"rows": 1, "columns": ["quantity", "unit", "haul", "cabin"], "filename": "a.csv"}
    waiting = engine.enqueue(
        "factors.csv_ingest",
        {"module": 1, "data_entry_type": "plane", "upload": {"id": kept, "path": "/etc/x", **old}},
        tenant=acme,
    )
    lost = engine.enqueue(
        "factors.factor_ingest", {"data_entry_type": "plane", "upload": {"id": gone, **old}}
    )

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    waiting.refresh_from_db()
    lost.refresh_from_db()
    assert (waiting.payload["upload"], lost.payload["upload"]) == (kept, gone)
    row = Upload.objects.get()
    assert (row.id.hex, row.kind, row.tenant_id, row.rows, row.columns) == (
        kept,
        "entries",
        acme.pk,
        1,
        old["columns"],
    )


@pytest.mark.django_db(transaction=True)
def test_files_staged_in_the_old_directory_move_to_the_intakes_store(settings, tmp_path):
    """Migration 0010: a waiting job's file moves from ``<dir>/<id>.csv`` to the intake's
    ``factors`` area, named by its id; other files of the old directory stay."""
    old, store = tmp_path / "uploads", tmp_path / "staging"
    old.mkdir()
    settings.FACTORS_UPLOAD_DIR, settings.INTAKE_STAGING_URL = str(old), str(store)
    executor = MigrationExecutor(connection)
    executor.migrate([("factors", "0009_load_chunks")])
    waiting, missing = uuid.uuid4(), uuid.uuid4()
    for upload_id in (waiting, missing):
        Upload.objects.create(
            id=upload_id, kind="entries", rows=1, columns=["quantity", "unit", "haul", "cabin"]
        )
    (old / f"{waiting.hex}.csv").write_bytes(b"12.5,km,short,economy\n")
    (old / "notes.txt").write_text("not a staged file")

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert (store / "factors" / waiting.hex).read_bytes() == b"12.5,km,short,economy\n"
    assert not (store / "factors" / missing.hex).exists()
    assert sorted(path.name for path in old.iterdir()) == ["notes.txt"]
