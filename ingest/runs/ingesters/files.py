"""Files in a directory, local or behind any fsspec URL (``memory://``, ``s3://`` …).

A source reads only its own tenant's area: the directory named after the tenant's slug
under one of the deployment's ``INGEST_FILE_ROOTS`` (``<root>/<tenant slug>/``), so that
no tenant can name another's files or a root that holds everyone's. Its URL is checked
when the source is saved and again on every batch, ``..`` is refused outright, and a
local directory or file is judged by where its symbolic links lead.

The files matching ``pattern`` are read in the order of their paths; a batch may span
files. The session names the file in progress and the records already taken of it
(``{"file": "a/b.jsonl", "offset": 120}``, plus for JSON Lines and CSV the byte
``position`` and ``line`` to seek to), never an index into a listing: a file added
during a run is read if its path sorts after the current one.

A file the session names that is gone is a transient error: a store whose listing lags
or a file being replaced may show it again, and skipping it would lose its records
silently; a file that stays gone exhausts the retries and fails the run, by name. Any
other ``OSError`` (an unreachable store) is transient too, except a refused permission.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from fsspec import AbstractFileSystem
from fsspec.core import split_protocol, url_to_fs
from fsspec.implementations.local import LocalFileSystem
from fsspec.registry import get_filesystem_class
from rest_framework import serializers

from ingest import conf
from ingest.runs.errors import SourceError
from ingest.runs.ingesters import file_formats
from ingest.runs.ingesters.base import Fetched, Ingester, register
from ingest.runs.ingesters.config import StrictConfig, bounded
from ingest.runs.ingesters.file_formats import Mark

LOCAL = "file"
# What a tenant's slug may be (a Django slug), and so the one path segment naming its area.
TENANT_SLUG = re.compile(r"^[-a-zA-Z0-9_]+\Z")


class Refused(ValueError):
    """A URL or pattern a file source may not use (the message follows its field name)."""


@dataclass(frozen=True)
class Location:
    """A directory as a protocol and a normalized path (a local one with its links
    resolved), comparable with the roots."""

    protocol: str
    path: str

    @classmethod
    def parse(cls, url: str) -> Location:
        if "::" in url:
            raise Refused("must be a single URL, not a chain of fsspec URLs")
        protocol, path = split_protocol(url)
        if ".." in path.replace("\\", "/").split("/"):
            raise Refused("must not contain '..'")
        if protocol in (None, LOCAL, "local"):
            if not os.path.isabs(path):
                raise Refused("must be an absolute directory path or a URL such as s3://bucket/dir")
            return cls(LOCAL, os.path.realpath(path))
        return cls(protocol, posixpath.normpath("/" + path).strip("/"))

    @property
    def url(self) -> str:
        return self.path if self.protocol == LOCAL else f"{self.protocol}://{self.path}"

    def within(self, root: Location) -> bool:
        if self.protocol != root.protocol:
            return False
        base = root.path.rstrip("/")
        return not base or self.path == base or self.path.startswith(f"{base}/")


def roots() -> list[Location]:
    configured = conf.get("FILE_ROOTS")
    if isinstance(configured, str):
        configured = configured.split(",")
    found = []
    for root in configured:
        root = str(root).strip()
        if not root:
            continue
        if split_protocol(root)[0] is None:
            root = os.path.abspath(root)
        try:
            found.append(Location.parse(root))
        except Refused as exc:
            raise ImproperlyConfigured(f"INGEST_FILE_ROOTS: {root!r} {exc}") from exc
    return found


def areas(tenant: str) -> list[Location]:
    """The tenant's directory under each root: ``<root>/<tenant slug>``."""
    if not TENANT_SLUG.match(tenant):
        # A slug is a single path segment by construction; anything else never names an area.
        raise Refused(f"cannot be used: {tenant!r} is not a tenant's slug")
    return [Location.parse(f"{root.url.rstrip('/')}/{tenant}") for root in roots()]


def allowed(url: str, tenant: str) -> Location:
    """Where ``url`` points, if it lies in ``tenant``'s area under one of the roots;
    ``Refused`` otherwise."""
    location = Location.parse(url)
    permitted = areas(tenant)
    if not permitted:
        raise Refused("cannot be used: no directory is open to file sources (INGEST_FILE_ROOTS)")
    if not any(location.within(area) for area in permitted):
        raise Refused("must lie in this tenant's directory: " + ", ".join(area.url for area in permitted))
    return location


def filesystem_class(location: Location) -> type[AbstractFileSystem]:
    try:
        return get_filesystem_class(location.protocol)
    except (ImportError, ValueError) as exc:
        raise Refused(
            f"needs the {location.protocol}:// filesystem, which this deployment does not have ({exc})"
        ) from None


def check_pattern(pattern: str) -> str:
    if pattern.startswith("/") or "::" in pattern or ".." in pattern.replace("\\", "/").split("/"):
        raise Refused("must be a glob relative to the url, without '..'")
    return pattern


class FilesConfig(StrictConfig):
    """A files source's settings; its serializer context names the source's tenant
    (``tenant``: the slug), whose area ``url`` must lie in."""

    url = serializers.CharField(max_length=2000)
    pattern = serializers.CharField(default="*", max_length=500)
    format = serializers.ChoiceField(choices=file_formats.FORMATS, required=False)

    def validate_url(self, value: str) -> str:
        try:
            filesystem_class(allowed(value, self.context["tenant"]))
        except Refused as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value

    def validate_pattern(self, value: str) -> str:
        try:
            return check_pattern(value)
        except Refused as exc:
            raise serializers.ValidationError(str(exc)) from None


@register
class Files(Ingester):
    kind = "files"
    label = "Files in a directory or an fsspec URL"
    config_serializer = FilesConfig

    def fetch(
        self, config: dict[str, Any], session: dict[str, Any], batch_size: int, *, tenant: str
    ) -> Fetched:
        source = Source.of(config, tenant)
        start = _start_of(session, source.url)
        try:
            return source.batch(start, batch_size)
        except FileNotFoundError as exc:
            raise SourceError(
                f"{source.url}: a file went missing while it was read ({exc})", transient=True
            ) from exc
        except PermissionError as exc:
            raise SourceError(f"{source.url}: permission denied ({exc})", transient=False) from exc
        except OSError as exc:
            raise SourceError(f"{source.url}: the store could not be read ({exc})", transient=True) from exc


def _start_of(session: dict[str, Any], where: str) -> tuple[str, Mark] | None:
    if not session:
        return None
    file, offset = session.get("file"), session.get("offset")
    position, line = session.get("position"), session.get("line", 0)
    counts = (offset, line) + ((position,) if position is not None else ())
    if (
        set(session) - {"file", "offset", "position", "line"}
        or not isinstance(file, str)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)
    ):
        raise SourceError(
            f"{where}: cannot continue from {session!r}, which this source did not write", transient=False
        )
    return file, Mark(offset, position, line)


@dataclass(frozen=True)
class Source:
    url: str  # as configured, for messages
    fs: AbstractFileSystem
    root: str
    pattern: str
    format: str | None

    @classmethod
    def of(cls, config: dict[str, Any], tenant: str) -> Source:
        try:
            location = allowed(config["url"], tenant)
            pattern = check_pattern(config.get("pattern") or "*")
            filesystem_class(location)
            fs, root = url_to_fs(location.url)
        except (Refused, ValueError) as exc:
            raise SourceError(f"{config['url']}: {exc}", transient=False) from None
        return cls(config["url"], fs, root.rstrip("/"), pattern, config.get("format"))

    def batch(self, start: tuple[str, Mark] | None, batch_size: int) -> Fetched:
        """Up to ``batch_size`` records after ``start`` and within the byte bound; one more
        is read, if there is one, to tell whether the source has more."""
        if batch_size < 1:
            raise ValueError("a batch takes at least one record")
        max_bytes = int(conf.get("MAX_BATCH_BYTES"))
        taken: list[dict[str, Any]] = []
        size = 0
        last = ("", Mark())  # the file and place after the last record taken
        with contextlib.closing(self._records(start, max_bytes)) as found:
            for name, record in found:
                if len(taken) == batch_size or (taken and size + record.size > max_bytes):
                    return Fetched(taken, bounded(_session(*last), self.url), has_more=True)
                taken.append(record.value)
                size += record.size
                last = (name, record.after)
        return Fetched(taken, {}, has_more=False)

    def _records(
        self, start: tuple[str, Mark] | None, max_bytes: int
    ) -> Iterator[tuple[str, file_formats.Record]]:
        names = self._names()
        if start is not None:
            if start[0] not in names:
                raise SourceError(f"{self.url}: {start[0]}, the file in progress, is gone", transient=True)
            names = [name for name in names if name >= start[0]]
        for name in names:
            mark = start[1] if start is not None and name == start[0] else Mark()
            fmt = file_formats.format_of(name, self.format)
            with (
                self.fs.open(f"{self.root}/{name}", "rb") as handle,
                contextlib.closing(file_formats.records(handle, fmt, name, mark, max_bytes)) as found,
            ):
                for record in found:
                    yield name, record

    def _names(self) -> list[str]:
        """The matching files' paths relative to the root, sorted."""
        if not self.fs.isdir(self.root):
            raise SourceError(f"{self.url} is not a directory", transient=False)
        found = self.fs.glob(f"{self.root}/{self.pattern}", detail=True)
        local = isinstance(self.fs, LocalFileSystem)  # where links exist, they are followed
        names = []
        for path, info in found.items():
            is_file = os.path.isfile(path) if local else info.get("type") == "file"
            if not is_file or not path.startswith(f"{self.root}/"):
                continue
            if local and not _inside(path, self.root):
                raise SourceError(
                    f"{self.url}: {path[len(self.root) + 1 :]} links to a file outside "
                    "the source's directory",
                    transient=False,
                )
            names.append(path[len(self.root) + 1 :])
        return sorted(names)


def _session(name: str, mark: Mark) -> dict[str, Any]:
    session: dict[str, Any] = {"file": name, "offset": mark.offset}
    if mark.position is not None:
        session.update(position=mark.position, line=mark.line)
    return session


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    return real.startswith(os.path.realpath(root).rstrip("/") + "/")
