"""Settings of the CO2 calculator, read lazily from Django settings (``FACTORS_*``)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings

MB = 1024 * 1024

DEFAULTS: dict[str, object] = {
    # Upload size limits per kind of file; bigger files are refused before any row is read.
    "ENTRIES_MAX_BYTES": 100 * MB,
    "FACTORS_MAX_BYTES": 20 * MB,
    "UNITS_MAX_BYTES": 20 * MB,
    # Rows per ingest transaction (the design's 1,000–5,000) and entries per
    # recalculation statement (set-based: bigger batches amortise the round trips).
    "INGEST_BATCH_ROWS": 5_000,
    "RECALC_BATCH_ROWS": 10_000,
    # Rows an ingest loads before it queues their recalculation, so that another worker
    # computes emissions while the load goes on (0: recalculate only after the load).
    "RECALC_CHUNK_ROWS": 50_000,
    # HTTP JSON sources (unit directory, API ingest), fetched under the intake's
    # outbound rules: seconds to resolve, connect and shake hands; seconds for the whole
    # fetch, body included (a source that trickles is cut off then); the body's bound.
    "HTTP_CONNECT_SECONDS": 10.0,
    "HTTP_DEADLINE_SECONDS": 60.0,
    "HTTP_MAX_BYTES": 50 * MB,
    # The unit directory's JSON endpoint, when POST /sync/units names no source.
    "UNITS_URL": "",
    # Hours the rows of an ingest that will never be read (it failed or was cancelled,
    # or its closing recalculation did) stay after its pipeline's last job ended, so
    # that an operator's retry resumes the load; then retention deletes them.
    "ABANDONED_LOAD_HOURS": 24.0,
}


def get(name: str) -> object:
    return getattr(settings, f"FACTORS_{name}", DEFAULTS[name])


def max_bytes(kind: str) -> int:
    return int(get(f"{kind.upper()}_MAX_BYTES"))  # type: ignore[call-overload]


def ingest_batch_rows() -> int:
    return int(get("INGEST_BATCH_ROWS"))  # type: ignore[call-overload]


def recalc_batch_rows() -> int:
    return int(get("RECALC_BATCH_ROWS"))  # type: ignore[call-overload]


def recalc_chunk_rows() -> int:
    return int(get("RECALC_CHUNK_ROWS"))  # type: ignore[call-overload]


def http_connect_seconds() -> float:
    return float(get("HTTP_CONNECT_SECONDS"))  # type: ignore[arg-type]


def http_deadline_seconds() -> float:
    return float(get("HTTP_DEADLINE_SECONDS"))  # type: ignore[arg-type]


def http_max_bytes() -> int:
    return int(get("HTTP_MAX_BYTES"))  # type: ignore[call-overload]


def abandoned_load_age() -> timedelta:
    return timedelta(hours=float(get("ABANDONED_LOAD_HOURS")))  # type: ignore[arg-type]


def units_url() -> str:
    return str(get("UNITS_URL") or "")
