"""Validated uploads waiting for their ingest job, as files under ``FACTORS_UPLOAD_DIR``.

The web process validates an upload in one streaming pass and writes its canonical rows
(``factors.csv_validation``) to a staging file; the job that ingests it reads that file
back with ``COPY``. Nothing of a refused file is kept. A staged file is deleted by the
job that ingested it; files of failed jobs stay so that a retry can run, until
``manage.py factors_clean_uploads`` removes old ones.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from factors import conf
from factors.csv_validation import CsvError, CsvSchema, ValidationReport, too_large, validate


@dataclass(frozen=True)
class StagedUpload:
    """A validated file: its canonical rows (no header) and the columns they hold."""

    id: str
    path: str
    rows: int
    columns: tuple[str, ...]
    filename: str

    def payload(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "rows": self.rows,
                "columns": list(self.columns), "filename": self.filename}

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> StagedUpload:
        return cls(id=data["id"], path=data["path"], rows=int(data["rows"]),
                   columns=tuple(data["columns"]), filename=data.get("filename", ""))

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
    return report, StagedUpload(upload_id, str(final), report.rows, tuple(report.header),
                                filename[:200])


def _known_size(source: BinaryIO) -> int | None:
    """The size of an uploaded file or an open regular file, when it is known."""
    size = getattr(source, "size", None)  # Django's UploadedFile
    if isinstance(size, int):
        return size
    try:
        return os.fstat(source.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


def discard(upload: StagedUpload) -> None:
    Path(upload.path).unlink(missing_ok=True)
