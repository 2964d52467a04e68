"""What a worker is told about an export job, and the column types every engine shares.

A claim of an export's engine job tells its worker the export as JSON (the claim's
``details``); ``JobSpec`` is that JSON read back, so that the worker, the engines and
the tests pass one typed value around instead of dicts. It holds
everything the export needs (the denormalised SQL, columns, role and destination), so a
worker never reads Conveyor's tables.

Column types are named as Trino names them (``bigint``, ``varchar``, ``decimal(12,4)``,
``timestamp(6) with time zone`` …): one vocabulary for the Trino engine, which reads
them off the query's answer, and the PostgreSQL engine, whose datasets declare them.
``exports.parquet.arrow_type`` maps each to its Parquet type.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit


def claim_folder(destination: str, generation: int) -> str:
    return f"{destination.rstrip('/')}/g{generation}"


def tenant_folder(root: str, tenant_id: int) -> str:
    """Where every file of the tenant's snapshots lies, under the export root."""
    return f"{root.rstrip('/')}/tenant-{tenant_id}"


def snapshot_folder(root: str, tenant_id: int, snapshot_id: int) -> str:
    return f"{tenant_folder(root, tenant_id)}/snapshot-{snapshot_id}"


def _parts(location: str) -> tuple[str, str, str] | None:
    """Scheme, bucket (or host) and path of a local path or an fsspec URL; None for one
    that names a place ambiguously (dot segments, a query or fragment, NUL)."""
    if "\x00" in location:
        return None
    if "://" in location:
        parts = urlsplit(location)
        scheme, bucket, path = parts.scheme.lower(), parts.netloc, parts.path
        # A bucket (or host) names where the path is, except for file:///a/path.
        if parts.query or parts.fragment or (not bucket and scheme != "file"):
            return None
    else:
        scheme, bucket, path = "", "", location
    if any(segment in (".", "..") for segment in path.split("/")):
        return None
    return scheme, bucket, posixpath.normpath(path) if path else ""


def relative_inside(location: str, folder: str) -> str | None:
    """``location``'s path below ``folder`` (``nodes/orders/part-g1.parquet``), or None
    when it does not lie strictly inside it: another scheme or bucket, a path elsewhere,
    ``..`` anywhere. Files a worker reports are kept only when they lie inside their
    job's folder; members are shown them relative to the snapshot's."""
    place, home = _parts(location), _parts(folder)
    if place is None or home is None or place[:2] != home[:2] or not home[2]:
        return None
    prefix = home[2].rstrip("/") + "/"
    if not place[2].startswith(prefix) or place[2] == prefix:
        return None
    return place[2][len(prefix) :]


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class JobSpec:
    id: int
    snapshot_id: int
    tenant_id: int
    # The export's claims so far, this one included: its files carry the number, apart
    # from those of any earlier claim, whose lost writer may still be at work.
    generation: int
    job_type: str  # "node" or "edge"
    entity_name: str
    engine: str  # "postgres" or "trino"
    sql: str
    column_names: tuple[str, ...]
    # Empty for the Trino engine, which takes the types from the query's answer.
    column_types: tuple[str, ...] = ()
    catalog: str = ""
    starburst_role: str = ""
    # A folder: a local path or an fsspec URL (s3://bucket/prefix/…).
    destination: str = ""
    status: str = "claimed"
    query_id: str = ""
    next_uri: str = ""
    poll_count: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def claim_folder(self) -> str:
        """Where this claim's engine writes the files of an UNLOAD: apart from any earlier
        claim's, whose lost query may still be writing."""
        return claim_folder(self.destination, self.generation)

    @property
    def columns(self) -> list[Column]:
        return [Column(name, type_) for name, type_ in zip(self.column_names, self.column_types, strict=True)]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobSpec:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        for key in ("column_names", "column_types"):
            values[key] = tuple(values.get(key) or ())
        for key in ("catalog", "starburst_role", "destination", "query_id", "next_uri"):
            values[key] = values.get(key) or ""
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["column_names"] = list(self.column_names)
        data["column_types"] = list(self.column_types)
        return data
