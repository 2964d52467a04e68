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
from exports.models import JobStatus, SnapshotStatus
from exports.spec import claim_folder
from jobs import reaper
from tests.support.exports.builders import claim_jobs, mapping, polled_jobs, report

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


def complete(job, written: parquet.Written) -> None:
    """The worker's completion: its files said relative to the job's folder (``report``)."""
    report(job, "completed", rows=written.rows, bytes=written.size, files=written.files)


def test_the_leftovers_of_dead_claims_are_gone_and_the_manifest_lists_the_snapshot(storage, clock):
    snap = one_node_snapshot()
    [job] = claim_jobs("dead", 1)
    write(job.destination, "part-g1.parquet", 7)  # a claim that finished writing, then died
    Path(job.destination, ".part-g1.parquet.0ff1ce.tmp").write_bytes(b"PAR1 half a file")
    services.reset_claim(job, None)
    [taken] = claim_jobs("alive", 1)
    assert (taken.pk, taken.generation) == (job.pk, 2)
    written = write(taken.destination, "part-g2.parquet", 3)

    complete(taken, written)

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


def test_the_files_of_a_lost_claims_unload_are_gone_when_the_next_claims_are_listed(storage, clock):
    snap = one_node_snapshot()
    [lost] = claim_jobs("dead", 1)
    # It submitted an UNLOAD into its claim's folder, and died before saying so.
    write(claim_folder(lost.destination, lost.generation), "20261127_q1-0.parquet", 7)
    clock.advance(services.LEASE_SECONDS + 1)
    assert reaper.rescue_expired().rescued == 1
    [taken] = claim_jobs("alive", 1)
    assert (taken.pk, taken.generation) == (lost.pk, 2)
    report(taken, "submitted", query_id="q2")
    written = write(claim_folder(taken.destination, taken.generation), "20261127_q2-0.parquet", 3)
    clock.advance(2)
    [polled] = polled_jobs("alive", 1)

    complete(polled, written)

    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY
    folder = Path(lost.destination).parent.parent
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "manifest.json",
        "nodes/bars/g2/20261127_q2-0.parquet",
    ]
    [entity] = json.loads((folder / "manifest.json").read_text())["entities"]
    assert (entity["rows"], entity["files"]) == (3, ["nodes/bars/g2/20261127_q2-0.parquet"])


def test_a_folder_that_cannot_be_sealed_leaves_the_snapshot_creating_until_it_can(storage, clock):
    snap = one_node_snapshot()
    [taken] = claim_jobs("alive", 1)
    written = write(taken.destination, "part-g1.parquet", 3)
    part = Path(written.files[0])
    aside = part.rename(part.parent.parent / "away.parquet")  # its storage is out of reach

    complete(taken, written)

    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING
    assert snap.jobs.get().status == JobStatus.COMPLETED
    folder = part.parent.parent.parent
    assert not (folder / "manifest.json").exists()
    aside.rename(part)
    assert reconcile.reconcile().snapshots_finished == 1
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY
    assert json.loads((folder / "manifest.json").read_text())["entities"][0]["rows"] == 3


def test_a_failed_snapshot_gets_no_manifest(storage, clock):
    snap = one_node_snapshot()
    [job] = claim_jobs("w", 1)
    write(job.destination, "part-g1.parquet", 3)  # written before it failed
    report(job, "failed", error="boom")
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED
    assert not list(Path(job.destination).parent.parent.rglob("manifest.json"))
