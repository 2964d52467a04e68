"""Settings of the market app, read from Django settings each time.

They keep the names they had while market data was a part of the ingest app
(``INGEST_MARKET_*``), so that a deployment's settings still apply; the connect timeout
is ingest's ``INGEST_HTTP_CONNECT_SECONDS``, one setting for every outbound HTTP source.
"""

from __future__ import annotations

from jobs import AppSettings

MB = 1024 * 1024

SETTINGS = AppSettings("INGEST_")
get = SETTINGS.get

# Market data: the market's timezone (its dates and the batch's hour), when the daily
# batch is due on a trading day, and how late a returning cluster may still run it.
market_timezone = SETTINGS.text("MARKET_TIMEZONE", "Asia/Shanghai")
market_batch_at = SETTINGS.text("MARKET_BATCH_AT", "18:30")
market_misfire_grace_seconds = SETTINGS.number("MARKET_MISFIRE_GRACE_SECONDS", 7200.0)
# The batch's gap-fill: days it looks back, and the most missing days it loads per run.
market_gap_lookback_days = SETTINGS.integer("MARKET_GAP_LOOKBACK_DAYS", 7)
market_gap_max_days = SETTINGS.integer("MARKET_GAP_MAX_DAYS", 3)
# How far back the watchdog and /quality/status look for open days without bars that
# the look-back no longer reaches (as far as an operator's gap-fill reaches in one go).
market_gap_alert_days = SETTINGS.integer("MARKET_GAP_ALERT_DAYS", 366)
# The batch's re-fetch: the last open days before today that have bars, loaded again so
# that a restatement published after their load arrives (0: none; at most
# ``batch.REFETCH_MAX_DAYS``).
market_refetch_days = SETTINGS.integer("MARKET_REFETCH_DAYS", 0)
# An operator's gap-fill: its longest range, and its loads' priority (below the daily
# batch's 10, so that a long backfill yields to it).
market_backfill_max_days = SETTINGS.integer("MARKET_BACKFILL_MAX_DAYS", 366)
market_backfill_priority = SETTINGS.integer("MARKET_BACKFILL_PRIORITY", -10)
# One API call: its deadline, from connecting to the answer's end (connecting alone is
# HTTP_CONNECT_SECONDS), and the answer's largest size and row count (a day of 5,000 bars
# is under 1 MB).
market_timeout_seconds = SETTINGS.number("MARKET_TIMEOUT_SECONDS", 30.0)
market_max_bytes = SETTINGS.integer("MARKET_MAX_BYTES", 16 * MB)
market_max_rows = SETTINGS.integer("MARKET_MAX_ROWS", 100_000)
# The watchdog (``manage.py ingest_check``): the latest daily date at most this many days
# old, and at least this many rows on it.
market_check_max_age_days = SETTINGS.integer("MARKET_CHECK_MAX_AGE_DAYS", 3)
market_check_min_rows = SETTINGS.integer("MARKET_CHECK_MIN_ROWS", 4000)
# Seconds to connect to the API (the same setting as ingest's HTTP JSON sources').
http_connect_seconds = SETTINGS.number("HTTP_CONNECT_SECONDS", 10.0)
