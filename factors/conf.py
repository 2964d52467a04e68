"""Settings of the CO2 calculator, read from Django settings each time (``FACTORS_*``)."""

from __future__ import annotations

from datetime import timedelta

from jobs import AppSettings

MB = 1024 * 1024

SETTINGS = AppSettings("FACTORS_")
get = SETTINGS.get

# Upload size limits per kind of file; bigger files are refused before any row is read.
entries_max_bytes = SETTINGS.integer("ENTRIES_MAX_BYTES", 100 * MB)
factors_max_bytes = SETTINGS.integer("FACTORS_MAX_BYTES", 20 * MB)
units_max_bytes = SETTINGS.integer("UNITS_MAX_BYTES", 20 * MB)
# Rows per ingest transaction (the design's 1,000–5,000) and entries per recalculation
# statement (set-based: bigger batches amortise the round trips).
ingest_batch_rows = SETTINGS.integer("INGEST_BATCH_ROWS", 5_000)
recalc_batch_rows = SETTINGS.integer("RECALC_BATCH_ROWS", 10_000)
# Rows an ingest loads before it queues their recalculation, so that another worker
# computes emissions while the load goes on (0: recalculate only after the load).
recalc_chunk_rows = SETTINGS.integer("RECALC_CHUNK_ROWS", 50_000)
# HTTP JSON sources (unit directory, API ingest), fetched under the intake's outbound
# rules: seconds to resolve, connect and shake hands; seconds for the whole fetch, body
# included (a source that trickles is cut off then); the body's bound.
http_connect_seconds = SETTINGS.number("HTTP_CONNECT_SECONDS", 10.0)
http_deadline_seconds = SETTINGS.number("HTTP_DEADLINE_SECONDS", 60.0)
http_max_bytes = SETTINGS.integer("HTTP_MAX_BYTES", 50 * MB)
# The unit directory's JSON endpoint, when POST /sync/units names no source.
units_url = SETTINGS.text("UNITS_URL", "")
# Hours the rows of an ingest that will never be read (it failed or was cancelled, or
# its closing recalculation did) stay after its pipeline's last job ended, so that an
# operator's retry resumes the load; then retention deletes them.
abandoned_load_hours = SETTINGS.number("ABANDONED_LOAD_HOURS", 24.0)


def max_bytes(kind: str) -> int:
    """The upload size limit of ``kind`` files: "entries", "factors" or "units"."""
    return int(SETTINGS.get(f"{kind.upper()}_MAX_BYTES"))


def abandoned_load_age() -> timedelta:
    return timedelta(hours=abandoned_load_hours())
