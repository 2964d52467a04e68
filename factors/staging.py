"""Validated uploads waiting for their ingest job: the calculator's records of files the
intake stages (``intake.staging``, area ``factors`` under ``INTAKE_STAGING_URL``).

The web process validates an upload and stages its canonical rows in one streaming pass
(``intake.staging.stage_csv``); the job that ingests it reads the file back with
``COPY``. Nothing of a refused file is kept. A staged file is recorded as an ``Upload``
row in the transaction that enqueues its job, and the job's payload names it by id
alone: the file follows from the id, and its columns and owner are read from the row,
through the job's tenant (``resolve``). A staged file is deleted by the job that
ingested it; files of failed jobs stay so that a retry can run, until
``manage.py factors_clean_uploads`` removes old ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

from factors.models import Upload
from intake import staging
from intake.csv_validation import CsvSchema, ValidationReport

AREA = "factors"


class UploadMissing(Exception):
    """A job names an upload that is not there for it (gone, another tenant's, or of
    another kind)."""


def store() -> staging.Store:
    return staging.store(AREA)


@dataclass(frozen=True)
class StagedUpload:
    """A validated file: its canonical rows (no header) and the columns they hold."""

    id: str
    rows: int
    columns: tuple[str, ...]
    filename: str

    @property
    def path(self) -> str:
        """Where the file is, for messages; always in the store, whatever the id (ids
        are checked hex)."""
        try:
            return store().location(self.id)
        except staging.NotStaged as exc:
            raise UploadMissing(str(exc)) from exc

    def exists(self) -> bool:
        return staging.is_staged_id(self.id) and store().exists(self.id)

    @contextmanager
    def open(self) -> Iterator[BinaryIO]:
        try:
            with store().open(self.id) as handle:
                yield handle
        except staging.NotStaged as exc:
            raise UploadMissing(str(exc)) from exc


def stage(
    source: BinaryIO, schema: CsvSchema, *, filename: str = ""
) -> tuple[ValidationReport, StagedUpload | None]:
    """Validate ``source`` and keep its canonical rows; None when the file is refused."""
    report, staged = staging.stage_csv(store(), source, schema)
    if staged is None:
        return report, None
    return report, StagedUpload(staged.id, staged.rows, staged.columns, filename[:200])


def register(upload: StagedUpload, kind: str, *, tenant_id: int | None, created_by: Any = None) -> str:
    """Record a staged file for the job about to be enqueued (in the same transaction);
    returns the id its payload carries."""
    Upload.objects.create(
        id=uuid.UUID(upload.id),
        kind=kind,
        tenant_id=tenant_id,
        rows=upload.rows,
        columns=list(upload.columns),
        filename=upload.filename,
        created_by=created_by,
    )
    return upload.id


def resolve(upload_id: Any, kind: str, *, tenant_id: int | None) -> StagedUpload:
    """The staged file a job's payload names, if it is of ``kind`` and belongs to the
    job's tenant (None: a platform job's, which has no tenant either)."""
    text = str(upload_id)
    if not staging.is_staged_id(text):
        raise UploadMissing(f"{text[:40]!r} is not an upload id")
    row = Upload.objects.filter(pk=uuid.UUID(text), kind=kind, tenant_id=tenant_id).first()
    if row is None:
        raise UploadMissing(f"upload {text} is gone or is not this job's to read: upload the file again")
    staged = StagedUpload(text, row.rows, tuple(row.columns), row.filename)
    if not staged.exists():
        raise UploadMissing(f"the staged file of upload {text} is gone: upload it again")
    return staged


def discard(upload: StagedUpload) -> None:
    """Delete a staged file and its record (an ingest that succeeded, or a refused one)."""
    Upload.objects.filter(pk=uuid.UUID(upload.id)).delete()
    store().delete(upload.id)
