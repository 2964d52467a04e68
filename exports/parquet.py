"""Parquet files of an export: the column types, writing one file, and reading folders back.

Every path is a local folder or an fsspec URL (``s3://bucket/prefix``, ``gs://…``,
``memory://…``), opened with the storage options the settings give. A file is written
under a hidden temporary name in its folder and renamed into place when complete, so a
reader listing the folder never finds half a file; names starting with ``_`` or ``.``
(temporaries, an engine's staging folders) are never counted as part of an export.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

if TYPE_CHECKING:
    from exports.spec import Column

# zstd at Arrow's default level: on mixed-type exports its files are about 40% smaller than
# snappy's for the same writing time, and every current Parquet reader reads it. Without
# dictionary pages: building dictionaries for mostly-distinct columns (ids, names, times)
# took half the writing time, and zstd's files came out smaller without them.
COMPRESSION = "zstd"
# The field metadata key that keeps the type a column was declared with.
SOURCE_TYPE_KEY = b"trino_type"

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "bigint": pa.int64(),
    "integer": pa.int32(),
    "smallint": pa.int16(),
    "tinyint": pa.int8(),
    "double": pa.float64(),
    "real": pa.float32(),
    "boolean": pa.bool_(),
    "varchar": pa.string(),
    "char": pa.string(),
    "date": pa.date32(),
    # Trino's plain ``decimal`` is decimal(38,0).
    "decimal": pa.decimal128(38, 0),
    "timestamp": pa.timestamp("us"),
    "timestamp with time zone": pa.timestamp("us", tz="UTC"),
    "json": pa.string(),
    "uuid": pa.string(),
    "varbinary": pa.binary(),
}
_SIZED_TEXT = re.compile(r"(?:varchar|char)\((\d+)\)")
_DECIMAL = re.compile(r"decimal\((\d+)(?:,(\d+))?\)")
_TIMESTAMP = re.compile(r"timestamp\((\d+)\)( with time zone)?")
_MAX_DECIMAL_PRECISION = 38
_MAX_TIMESTAMP_PRECISION = 12


class UnsupportedType(ValueError):
    """A column type no Parquet type is chosen for."""

    def __init__(self, trino_type: str) -> None:
        super().__init__(f"unsupported column type {trino_type!r}")
        self.trino_type = trino_type


class Written(NamedTuple):
    rows: int
    size: int
    # The full path or URL of each file written or found.
    files: list[str]


def _normalise(trino_type: str) -> str:
    text = " ".join(trino_type.lower().split())
    return re.sub(r"\s*([(,])\s*|\s+(?=\))", r"\1", text)


def arrow_type(trino_type: str) -> pa.DataType:
    """The Arrow (and so Parquet) type of a column of this Trino type.

    Timestamps are kept to the microsecond whatever their precision, zoned ones in UTC.
    """
    name = _normalise(trino_type)
    if name in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[name]
    if _SIZED_TEXT.fullmatch(name):
        return pa.string()
    if match := _DECIMAL.fullmatch(name):
        precision, scale = int(match[1]), int(match[2] or 0)
        if 1 <= precision <= _MAX_DECIMAL_PRECISION and scale <= precision:
            return pa.decimal128(precision, scale)
    elif (match := _TIMESTAMP.fullmatch(name)) and int(match[1]) <= _MAX_TIMESTAMP_PRECISION:
        return pa.timestamp("us", tz="UTC" if match[2] else None)
    raise UnsupportedType(trino_type)


def arrow_schema(columns: list[Column]) -> pa.Schema:
    """The file schema of these columns, in their order; each field keeps its declared type."""
    return pa.schema(
        [
            pa.field(column.name, arrow_type(column.type), metadata={SOURCE_TYPE_KEY: column.type})
            for column in columns
        ]
    )


def use_jemalloc() -> str:
    """Give Arrow jemalloc's pool where this pyarrow has it; the pool's name.

    For a process that writes large files (an export worker): Arrow's default, mimalloc,
    keeps the pages of freed blocks, and a 1 M-row export peaked at 300–320 MB of RSS
    with it against about 225 MB with jemalloc, which was no slower.
    """
    with contextlib.suppress(NotImplementedError):  # a build without jemalloc
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(0)
    return pa.default_memory_pool().backend_name


def open_destination(
    url: str,
    storage_options: dict[str, Any] | None = None,
) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem of ``url`` and the path on it (without the protocol)."""
    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, path.rstrip("/") or path


def _url(destination: str, fs: fsspec.AbstractFileSystem, path: str) -> str:
    """``path`` as the caller named its destination: with the protocol when it had one."""
    return fs.unstrip_protocol(path) if "://" in destination else path


def write_batches(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    destination: str,
    file_name: str,
    storage_options: dict[str, Any] | None = None,
    *,
    row_group_rows: int = 128 * 1024,
) -> Written:
    """Write the batches into one Parquet file ``destination/file_name``, streaming.

    The batches are cast to ``schema``; at most one row group's worth of rows is held at
    a time. The file appears under its name only once complete; if the batches raise,
    the temporary file is removed and the error propagates.
    """
    fs, folder = open_destination(destination, storage_options)
    fs.makedirs(folder, exist_ok=True)
    final = f"{folder}/{file_name}"
    temporary = f"{folder}/.{file_name}.{uuid.uuid4().hex}.tmp"
    try:
        with (
            fs.open(temporary, "wb") as sink,
            pq.ParquetWriter(sink, schema, compression=COMPRESSION, use_dictionary=False) as writer,
        ):
            rows = _write_row_groups(writer, batches, schema, row_group_rows)
        fs.mv(temporary, final)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(temporary)
        raise
    return Written(rows, fs.size(final), [_url(destination, fs, final)])


def _write_row_groups(
    writer: pq.ParquetWriter, batches: Iterable[pa.RecordBatch], schema: pa.Schema, row_group_rows: int
) -> int:
    # ParquetWriter makes each write at least one row group: batches (a CSV block, a page
    # of a query's answer) are gathered into whole row groups rather than written one by one.
    # A row group is encoded and compressed on a thread of its own while the next is
    # gathered: the source (Arrow's reader keeps only a couple of blocks ahead) would
    # otherwise wait for every write. One write at a time, so memory holds two row groups.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-writer") as pool:
        writing: Future[None] | None = None

        def write(table: pa.Table) -> None:
            nonlocal writing
            if writing is not None:
                writing.result()
            writing = pool.submit(writer.write_table, table, row_group_size=row_group_rows)

        pending: list[pa.RecordBatch] = []
        pending_rows = rows = 0
        try:
            for batch in _conformed(batches, schema):
                pending.append(batch)
                pending_rows += batch.num_rows
                rows += batch.num_rows
                if pending_rows >= row_group_rows:
                    table = pa.Table.from_batches(pending, schema)
                    whole = pending_rows - pending_rows % row_group_rows
                    write(table.slice(0, whole))
                    pending = table.slice(whole).to_batches()
                    pending_rows -= whole
            if pending_rows:
                write(pa.Table.from_batches(pending, schema))
        except BaseException:
            if writing is not None:
                # The file is abandoned: the write under way has to end, and its own
                # error is not news.
                with contextlib.suppress(Exception):
                    writing.result()
            raise
        if writing is not None:
            writing.result()
    return rows


def _conformed(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if batch.schema.names != schema.names:
            raise ValueError(f"a batch has the columns {batch.schema.names}, the file {schema.names}")
        if not batch.schema.equals(schema, check_metadata=False):
            batch = batch.cast(schema)
        yield batch


def _parquet_files(fs: fsspec.AbstractFileSystem, folder: str) -> dict[str, dict[str, Any]]:
    """The Parquet files under ``folder`` (any depth), without hidden or temporary ones."""
    found: dict[str, dict[str, Any]] = fs.find(folder, detail=True)
    prefix = folder.rstrip("/") + "/"
    return {
        path: info
        for path, info in sorted(found.items())
        if path.endswith(".parquet")
        and path.startswith(prefix)
        and not any(part.startswith(("_", ".")) for part in path[len(prefix) :].split("/"))
    }


def count_rows(destination: str, storage_options: dict[str, Any] | None = None) -> Written:
    """The rows, bytes and files of the Parquet files under ``destination``, from their
    footers alone (no data is read); an empty or missing folder counts zero."""
    fs, folder = open_destination(destination, storage_options)
    rows = size = 0
    files = []
    for path, info in _parquet_files(fs, folder).items():
        with fs.open(path, "rb") as source:
            rows += pq.read_metadata(source).num_rows
        size += int(info["size"])
        files.append(_url(destination, fs, path))
    return Written(rows, size, files)


MANIFEST = "manifest.json"


def file_columns(url: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """The columns of a Parquet file, each ``{"name", "type"}`` (Arrow's name of the type),
    from its footer alone."""
    fs, path = open_destination(url, storage_options)
    with fs.open(path, "rb") as source:
        schema = pq.read_schema(source)
    return [{"name": field.name, "type": str(field.type)} for field in schema]


def write_manifest(
    folder: str, manifest: dict[str, Any], storage_options: dict[str, Any] | None = None
) -> str:
    """Write ``manifest`` as ``folder/manifest.json``, whole or not at all (under a
    temporary name first); return its location."""
    fs, path = open_destination(folder, storage_options)
    fs.makedirs(path, exist_ok=True)
    final = f"{path}/{MANIFEST}"
    temporary = f"{path}/.{MANIFEST}.{uuid.uuid4().hex}.tmp"
    try:
        with fs.open(temporary, "wb") as sink:
            sink.write(json.dumps(manifest, indent=2, sort_keys=True).encode())
        fs.mv(temporary, final)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(temporary)
        raise
    return _url(folder, fs, final)


def remove_files(
    destination: str, keep: Iterable[str] = (), storage_options: dict[str, Any] | None = None
) -> list[str]:
    """Delete every file under ``destination`` (temporaries and hidden ones too) except
    those in ``keep`` (paths or URLs as ``Written.files`` names them); return the deleted."""
    fs, folder = open_destination(destination, storage_options)
    kept = {open_destination(url, storage_options)[1] for url in keep}
    doomed = [path for path in sorted(fs.find(folder)) if path not in kept]
    if doomed:
        fs.rm(doomed)
    if isinstance(fs, LocalFileSystem):
        _remove_empty_folders(fs, folder)
    return [_url(destination, fs, path) for path in doomed]


def _remove_empty_folders(fs: LocalFileSystem, folder: str) -> None:
    # Only locally: an object store has no folders, and s3fs' rmdir of a bucket deletes it.
    folders = [
        path
        for path, info in fs.find(folder, withdirs=True, detail=True).items()
        if info["type"] == "directory" and path != folder
    ]
    for path in sorted(folders, key=len, reverse=True):
        with contextlib.suppress(OSError):
            fs.rmdir(path)
