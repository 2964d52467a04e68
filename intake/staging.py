"""Staged files: validated rows waiting for the job that reads them, stored through fsspec.

A store is a root URL (``INTAKE_STAGING_URL``: a local directory by default, or any
fsspec URL such as ``s3://bucket/staging``) and an area under it, one per app, so that
one app's cleanup never lists another's files; an app whose staged files are handed to
a tenant's hooks keeps each tenant's in a folder of its own. Every web and worker
process must see the same root.

A staged file is named by an id this module draws (32 hex digits). Paths are only ever
built from ids that match that pattern, so no caller input can name a file outside the
store. A file is written under a temporary name and renamed only when its writer keeps
it, so a half-written or refused file never looks staged. Writes are bounded: a file
stops growing at its limit (``INTAKE_STAGING_MAX_BYTES`` at most).

``stage_csv`` validates a CSV file (``intake.csv_validation``) and stages its canonical
rows in one streaming pass. Reading a staged file back gives a binary file object, which
can be handed to psycopg's ``COPY … FROM STDIN`` in chunks.

Recording who owns a staged file, and for which job, is the calling app's business.
"""

from __future__ import annotations

import io
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs

from intake import conf
from intake.csv_validation import CsvError, CsvSchema, ValidationReport, human, too_large, validate

STAGED_ID = re.compile(r"^[0-9a-f]{32}$")
AREA = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# A tenant's slug (a Django slug): one path segment, never '.' or '..'.
TENANT = re.compile(r"^[-a-zA-Z0-9_]{1,60}\Z")
PARTIAL = ".partial"


class StagingError(Exception):
    """A staged file cannot be written or read."""


class NotStaged(StagingError):
    """Not a staged file's id, or its file is gone."""


class StagedTooLarge(StagingError):
    """A write went over the file's size bound; the file is not kept."""


def is_staged_id(value: object) -> bool:
    return isinstance(value, str) and STAGED_ID.match(value) is not None


@dataclass(frozen=True)
class StoredFile:
    """A file found by listing the store: its name there, the id it carries (None for a
    partial file or a stray), its last change and its size."""

    name: str
    staged_id: str | None
    modified: datetime
    size: int


class Pending:
    """A staged file being written: ``write`` counts bytes against the bound; ``keep``
    marks it to be kept once the writing block ends without an error."""

    def __init__(self, handle: BinaryIO, staged_id: str, max_bytes: int) -> None:
        self.id = staged_id
        self.max_bytes = max_bytes
        self.written = 0
        self.kept = False
        self._handle = handle

    def write(self, data: bytes) -> int:
        self.written += len(data)
        if self.written > self.max_bytes:
            raise StagedTooLarge(f"a staged file may hold at most {human(self.max_bytes)}")
        self._handle.write(data)
        return len(data)

    def keep(self) -> None:
        self.kept = True


class Store:
    """Staged files under one root URL, through its fsspec filesystem."""

    def __init__(self, url: str, *, max_bytes: int, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self._options = dict(storage_options or {})

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def _fs(self) -> tuple[AbstractFileSystem, str]:
        # fsspec caches filesystem instances: asking again is cheap, and a process that
        # forked after the first call gets its own.
        fs, root = url_to_fs(self.url, **self._options)
        return fs, root.rstrip("/")

    def path(self, staged_id: str) -> str:
        """The full path of a staged file; NotStaged for anything but a staged id."""
        if not is_staged_id(staged_id):
            raise NotStaged(f"{str(staged_id)[:40]!r} is not a staged file's id")
        return f"{self._fs[1]}/{staged_id}"

    def location(self, staged_id: str) -> str:
        """Where a staged file is, for messages and logs."""
        self.path(staged_id)  # checks the id
        return f"{self.url.rstrip('/')}/{staged_id}"

    # -- writing ----------------------------------------------------------------------------

    @contextmanager
    def stage(self, *, max_bytes: int | None = None) -> Iterator[Pending]:
        """Write a new staged file. It is kept (renamed to its id) only if the block calls
        ``keep()`` and ends without an error; otherwise nothing of it stays."""
        fs, root = self._fs
        staged_id = uuid.uuid4().hex
        partial, final = f"{root}/.{staged_id}{PARTIAL}", f"{root}/{staged_id}"
        bound = self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)
        fs.makedirs(root, exist_ok=True)
        try:
            with fs.open(partial, "wb") as handle:
                pending = Pending(handle, staged_id, bound)
                yield pending
            if pending.kept:
                fs.mv(partial, final)
        finally:
            _remove(fs, partial)

    # -- reading ----------------------------------------------------------------------------

    @contextmanager
    def open(self, staged_id: str) -> Iterator[BinaryIO]:
        """A staged file for reading, as a binary file object (``read``, lines)."""
        fs, _ = self._fs
        try:
            handle = fs.open(self.path(staged_id), "rb")
        except FileNotFoundError:
            raise NotStaged(f"the staged file {staged_id} is gone") from None
        with handle:
            yield handle

    def exists(self, staged_id: str) -> bool:
        fs, _ = self._fs
        return bool(fs.exists(self.path(staged_id)))

    def size(self, staged_id: str) -> int:
        fs, _ = self._fs
        try:
            return int(fs.size(self.path(staged_id)))
        except FileNotFoundError:
            raise NotStaged(f"the staged file {staged_id} is gone") from None

    # -- removing ---------------------------------------------------------------------------

    def delete(self, staged_id: str) -> None:
        """Delete a staged file; nothing happens if it is already gone."""
        fs, _ = self._fs
        _remove(fs, self.path(staged_id))

    def older_than(self, age: timedelta) -> list[StoredFile]:
        """The files last changed more than ``age`` ago, partial ones and strays
        included, as the listing names them."""
        cutoff = datetime.now(UTC) - age
        return [found for found in self.files() if found.modified < cutoff]

    def files(self) -> list[StoredFile]:
        fs, root = self._fs
        try:
            listing = fs.ls(root, detail=True)
        except FileNotFoundError:
            return []
        found = []
        for entry in listing:
            if entry.get("type") != "file":
                continue
            name = str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
            found.append(
                StoredFile(
                    name,
                    name if is_staged_id(name) else None,
                    _modified(fs, entry),
                    int(entry.get("size") or 0),
                )
            )
        return found

    def remove(self, found: StoredFile) -> None:
        """Delete a file that ``files`` or ``older_than`` listed. The name comes from the
        listing; a name with a separator in it is not one of the store's files."""
        if "/" in found.name or found.name in ("", ".", ".."):
            raise StagingError(f"{found.name[:40]!r} is not a file of {self!r}")
        fs, root = self._fs
        _remove(fs, f"{root}/{found.name}")


def _remove(fs: AbstractFileSystem, path: str) -> None:
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass


def _modified(fs: AbstractFileSystem, entry: Mapping[str, Any]) -> datetime:
    """A listed file's last change, from the listing when it says (local: mtime, object
    stores: LastModified, memory: created), or asked of the filesystem."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = entry.get(key)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
    when = fs.modified(entry["name"])
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def store(area: str, *, tenant: str | None = None) -> Store:
    """The store of one app's area under ``INTAKE_STAGING_URL`` (and, given a tenant's
    slug, that tenant's folder in it: ``<root>/<area>/<tenant>``), with the settings'
    bound and filesystem options (read at each call: a test's settings override applies)."""
    if not AREA.match(area):
        raise ValueError(f"{area!r} is not a staging area name (lower-case letters, digits, _)")
    url = f"{conf.staging_url().rstrip('/')}/{area}"
    if tenant is not None:
        if not TENANT.match(tenant):
            raise ValueError(f"{tenant[:60]!r} is not a tenant's slug")
        url = f"{url}/{tenant}"
    return Store(url, max_bytes=conf.staging_max_bytes(), storage_options=conf.staging_options())


# --- a CSV file, validated while it is staged ---------------------------------------------------


@dataclass(frozen=True)
class StagedCsv:
    """A validated CSV file's canonical rows (no header) and the columns they hold, in
    the order of the file's header."""

    id: str
    rows: int
    columns: tuple[str, ...]


def stage_csv(
    target: Store, source: BinaryIO, schema: CsvSchema
) -> tuple[ValidationReport, StagedCsv | None]:
    """Validate ``source`` against ``schema`` and stage its canonical rows; None when
    the file is refused, and then nothing of it is kept. A file whose size is known to be
    over the schema's limit is refused before a byte of it is read."""
    size = known_size(source)
    if size is not None and size > schema.max_bytes:
        report = ValidationReport()
        report.add(CsvError(None, None, too_large(schema.max_bytes)))
        return report, None
    try:
        with target.stage() as pending:
            report = validate(source, schema, out=pending)
            if report.ok:
                pending.keep()
    except StagedTooLarge:
        report = ValidationReport()
        report.add(CsvError(None, None, too_large(pending.max_bytes)))
    if not report.ok:
        return report, None
    return report, StagedCsv(pending.id, report.rows, tuple(report.header))


def known_size(source: BinaryIO) -> int | None:
    """The size of an uploaded file or an open regular file, when it is known."""
    size = getattr(source, "size", None)  # Django's UploadedFile
    if isinstance(size, int):
        return size
    try:
        return os.fstat(source.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
