"""Validated uploads waiting for their ingest job, as files under ``FACTORS_UPLOAD_DIR``.

The web process validates an upload in one streaming pass and writes its canonical rows
(``factors.csv_validation``) to a staging file; the job that ingests it reads that file
back with ``COPY``. Nothing of a refused file is kept. A staged file is recorded as an
``Upload`` row in the transaction that enqueues its job, and the job's payload names it
by id alone: the file's path follows from the id, and its columns and owner are read
from the row, through the job's tenant (``resolve``). A staged file is deleted by the
job that ingested it; files of failed jobs stay so that a retry can run, until
``manage.py factors_clean_uploads`` removes old ones.
"""

from __future__ import annotations

import io
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from factors import conf
from factors.csv_validation import CsvError, CsvSchema, ValidationReport, too_large, validate
from factors.models import Upload

UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


class UploadMissing(Exception):
    """A job names an upload that is not there for it (gone, another tenant's, or of
    another kind)."""


@dataclass(frozen=True)
class StagedUpload:
    """A validated file: its canonical rows (no header) and the columns they hold."""

    id: str
    rows: int
    columns: tuple[str, ...]
    filename: str

    @property
    def path(self) -> str:
        """Always under the upload directory, whatever the id: ids are checked hex."""
        if not UPLOAD_ID.match(self.id):
            raise UploadMissing(f"{self.id!r} is not an upload id")
        return str(conf.upload_dir() / f"{self.id}.csv")

    def exists(self) -> bool:
        return Path(self.path).exists()

    @contextmanager
    def open(self) -> Iterator[BinaryIO]:
        with open(self.path, "rb") as handle:
            yield handle


def stage(source: BinaryIO, schema: CsvSchema, *, filename: str = ""
          ) -> tuple[ValidationReport, StagedUpload | None]:
    """Validate ``source`` and keep its canonical rows; None when the file is refused.

    The rows go to a hidden temporary name first and are renamed only when the whole file
    is valid, so a half-written or refused file never looks like an upload.
    """
    size = _known_size(source)
    if size is not None and size > schema.max_bytes:
        report = ValidationReport()
        report.add(CsvError(None, None, too_large(schema.max_bytes)))
        return report, None  # refused before reading a byte
    directory = conf.upload_dir()
    directory.mkdir(parents=True, exist_ok=True)
    upload_id = uuid.uuid4().hex
    final = directory / f"{upload_id}.csv"
    partial = directory / f".{upload_id}.partial"
    try:
        with open(partial, "wb") as out:
            report = validate(source, schema, out=out)
        if not report.ok:
            return report, None
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    return report, StagedUpload(upload_id, report.rows, tuple(report.header), filename[:200])


def _known_size(source: BinaryIO) -> int | None:
    """The size of an uploaded file or an open regular file, when it is known."""
    size = getattr(source, "size", None)  # Django's UploadedFile
    if isinstance(size, int):
        return size
    try:
        return os.fstat(source.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


def register(upload: StagedUpload, kind: str, *, tenant_id: int | None,
             created_by: Any = None) -> str:
    """Record a staged file for the job about to be enqueued (in the same transaction);
    returns the id its payload carries."""
    Upload.objects.create(id=uuid.UUID(upload.id), kind=kind, tenant_id=tenant_id,
                          rows=upload.rows, columns=list(upload.columns),
                          filename=upload.filename, created_by=created_by)
    return upload.id


def resolve(upload_id: Any, kind: str, *, tenant_id: int | None) -> StagedUpload:
    """The staged file a job's payload names, if it is of ``kind`` and belongs to the
    job's tenant (None: a platform job's, which has no tenant either)."""
    text = str(upload_id)
    if not UPLOAD_ID.match(text):
        raise UploadMissing(f"{text[:40]!r} is not an upload id")
    row = Upload.objects.filter(pk=uuid.UUID(text), kind=kind, tenant_id=tenant_id).first()
    if row is None:
        raise UploadMissing(f"upload {text} is gone or is not this job's to read: upload "
                            "the file again")
    staged = StagedUpload(text, row.rows, tuple(row.columns), row.filename)
    if not staged.exists():
        raise UploadMissing(f"the staged file of upload {text} is gone: upload it again")
    return staged


def discard(upload: StagedUpload) -> None:
    """Delete a staged file and its record (an ingest that succeeded, or a refused one)."""
    Upload.objects.filter(pk=uuid.UUID(upload.id)).delete()
    Path(upload.path).unlink(missing_ok=True)
