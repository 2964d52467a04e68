"""Reading a sync's body: its scrape run id and references, checked before anything is
written, each problem named by where it is (``references[12].payload`` …)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.api import holds_nul
from ingest import conf
from ingest.scraping.hashing import canonical_json, hash_of
from ingest.scraping.models import EXTERNAL_ID_LENGTH, SCRAPE_RUN_ID_LENGTH


class SyncRefused(Exception):
    """A sync's input that cannot be taken; ``field`` names what is wrong."""

    def __init__(self, field_name: str, message: str, *, too_many: bool = False) -> None:
        super().__init__(message)
        self.field = field_name
        self.too_many = too_many  # more references than one sync may bring


@dataclass(frozen=True)
class Incoming:
    """A sync's references, checked: parallel lists, external ids distinct."""

    external_ids: list[str]
    payloads: list[str]  # canonical JSON text
    hashes: list[str]

    def __len__(self) -> int:
        return len(self.external_ids)


@dataclass(frozen=True)
class Reference:
    """One reference of a sync, checked: its external id, canonical payload and hash.
    ``index`` is its place in the body, for naming a duplicate."""

    index: int
    external_id: str
    payload: str  # canonical JSON text
    hash: str


def max_references() -> int:
    return int(conf.get("SCRAPE_MAX_REFERENCES"))


def too_many(count: str, limit: int) -> SyncRefused:
    return SyncRefused(
        "references",
        f"{count} references in one sync; the limit is {limit:,} "
        "(send the rest in further syncs of the same scrape run)",
        too_many=True,
    )


def read_reference(index: int, item: Any) -> Reference:
    """The reference at ``index`` of a sync body: ``{"external_id": str, "payload": {...}}``.
    The API calls it as each item arrives (the payload's objects are dropped once its
    canonical text is made); ``SyncRefused`` names the problem."""
    where = f"references[{index}]"
    if not isinstance(item, dict) or set(item) - {"external_id", "payload"}:
        raise SyncRefused(where, f"{where} must be an object with external_id and payload only")
    external_id, payload = item.get("external_id"), item.get("payload")
    if (
        not isinstance(external_id, str)
        or not 0 < len(external_id) <= EXTERNAL_ID_LENGTH
        or not _storable(external_id)
    ):
        raise SyncRefused(
            f"{where}.external_id",
            f"{where}.external_id must be a string of "
            f"1 to {EXTERNAL_ID_LENGTH} characters "
            "(no NUL, no lone surrogate)",
        )
    if not isinstance(payload, dict):
        raise SyncRefused(f"{where}.payload", f"{where}.payload must be a JSON object")
    try:
        text = canonical_json(payload)
    except UnicodeEncodeError:
        raise SyncRefused(
            f"{where}.payload", f"{where}.payload holds a lone surrogate (\\ud800 …), which is no character"
        ) from None
    except ValueError as exc:  # NaN or Infinity
        raise SyncRefused(f"{where}.payload", f"{where}.payload: {exc}") from None
    if b"\\u0000" in text and holds_nul(payload):
        raise SyncRefused(
            f"{where}.payload", f"{where}.payload holds a NUL character (\\u0000), which cannot be stored"
        )
    return Reference(index, external_id, text.decode(), hash_of(payload, text))


def read_references(items: Any) -> Incoming:
    """The references of a sync body: a list of ``{"external_id": str, "payload": {...}}``
    (or of ``Reference``, read as they arrived), at most ``SCRAPE_MAX_REFERENCES``, each
    external id once. ``SyncRefused`` names the first problem (``references[12].payload``
    …); nothing is written for a refused sync."""
    if not isinstance(items, list):
        raise SyncRefused(
            "references", 'references must be a list of {"external_id": ..., "payload": {...}} objects'
        )
    limit = max_references()
    if len(items) > limit:
        raise too_many(f"{len(items):,}", limit)
    read = [
        item if isinstance(item, Reference) else read_reference(index, item)
        for index, item in enumerate(items)
    ]
    seen: dict[str, int] = {}
    for reference in read:
        if reference.external_id in seen:
            where = f"references[{reference.index}].external_id"
            raise SyncRefused(
                where,
                f"{where} {reference.external_id!r} is also references"
                f"[{seen[reference.external_id]}]'s; each reference comes "
                "once per sync",
            )
        seen[reference.external_id] = reference.index
    # In the order of their ids: concurrent syncs then lock shared references in the same
    # order, and never deadlock on them.
    read.sort(key=lambda reference: reference.external_id)
    return Incoming([r.external_id for r in read], [r.payload for r in read], [r.hash for r in read])


def _storable(text: str) -> bool:
    """Whether PostgreSQL can store ``text``: no NUL, and valid UTF-8 (no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_scrape_run_id(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not 0 < len(value.strip()) <= SCRAPE_RUN_ID_LENGTH
        or not _storable(value)
    ):
        raise SyncRefused(
            "scrape_run_id",
            f"scrape_run_id must be a non-empty string of at most {SCRAPE_RUN_ID_LENGTH} characters",
        )
    return value.strip()
