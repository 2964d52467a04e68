"""A snapshot is ready only once its folder holds exactly its files: what claims that
died or were reset left there (partial ``.tmp`` files, whole files of a lost claim) is
removed first, and ``manifest.json``, written last, lists each entity's files, rows,
bytes and columns. A folder that cannot be sealed leaves the snapshot creating, for the
reconciliation to seal on its next pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exports import parquet, reconcile, services
from exports.models import SnapshotStatus
from tests.support.exports.builders import mapping

pytestmark = pytest.mark.django_db
DONE = {"ts_code": ["a", "b", "c"]}


@pytest.fixture
def storage(settings, tmp_path) -> Path:
    settings.EXPORTS_STORAGE_URL = str(tmp_path / "exports")
    return tmp_path / "exports"


def one_node_snapshot():
    return services.create_snapshot(
        mapping(entities=[{"kind": "node", "name": "bars", "dataset": "daily_bars", "columns": ["ts_code"]}])
    )


def write(folder: str, name: str, rows: int) -> parquet.Written:
    import pyarrow as pa

    table = pa.table({"ts_code": [f"{n:06d}" for n in range(rows)]})
    return parquet.write_batches(table.to_batches(), table.schema, folder, name)


def complete(job_spec: tuple, written: parquet.Written) -> None:
    job, token = job_spec
    services.report(
        job.pk,
        services.Report(
            "completed",
            job.generation,
            worker="w",
            claim_token=token,
            row_count=written.rows,
            size_bytes=written.size,
            files=tuple(written.files),
        ),
    )


def test_the_leftovers_of_dead_claims_are_gone_and_the_manifest_lists_the_snapshot(storage, clock):
    snap = one_node_snapshot()
    [(job, _)] = services.claim("dead", 1)
    write(job.destination, "part-g1.parquet", 7)  # a claim that finished writing, then died
    Path(job.destination, ".part-g1.parquet.0ff1ce.tmp").write_bytes(b"PAR1 half a file")
    services.reset_claim(job, None)
    taken = services.claim("alive", 1)
    written = write(taken[0][0].destination, "part-g2.parquet", 3)

    complete(taken[0], written)

    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY
    folder = Path(job.destination).parent.parent
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "manifest.json",
        "nodes/bars/part-g2.parquet",
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest == {
        "snapshot": snap.pk,
        "mapping": "co2",
        "created_at": snap.created_at.isoformat(),
        "entities": [
            {
                "kind": "node",
                "name": "bars",
                "rows": 3,
                "bytes": written.size,
                "files": ["nodes/bars/part-g2.parquet"],
                "columns": [{"name": "ts_code", "type": "string"}],
            }
        ],
    }


def test_a_folder_that_cannot_be_sealed_leaves_the_snapshot_creating_until_it_can(storage, clock):
    snap = one_node_snapshot()
    [taken] = services.claim("alive", 1)
    written = write(taken[0].destination, "part-g1.parquet", 3)
    part = Path(written.files[0])
    aside = part.rename(part.parent.parent / "away.parquet")  # its storage is out of reach

    complete(taken, written)

    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING
    assert snap.jobs.get().status == "completed"
    folder = part.parent.parent.parent
    assert not (folder / "manifest.json").exists()
    aside.rename(part)
    assert reconcile.reconcile().snapshots_finished == 1
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY
    assert json.loads((folder / "manifest.json").read_text())["entities"][0]["rows"] == 3


def test_a_failed_snapshot_gets_no_manifest(storage, clock):
    snap = one_node_snapshot()
    [(job, token)] = services.claim("w", 1)
    services.report(
        job.pk, services.Report("failed", job.generation, worker="w", claim_token=token, error_message="boom")
    )
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED
    assert not list(Path(job.destination).parent.parent.rglob("manifest.json"))
