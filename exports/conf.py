"""Settings of the exports app, read from Django settings each time (``EXPORTS_*``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from jobs import AppSettings

SETTINGS = AppSettings("EXPORTS_")
get = SETTINGS.get


def _storage_folder(configured: Any) -> str:
    return str(configured) if configured else str(settings.VAR_DIR / "exports")


# Where snapshots' files go: a local folder (empty: VAR_DIR/exports) or an fsspec URL
# (s3://bucket/prefix, gs://bucket/prefix), and the filesystem's options (credentials,
# endpoint_url …) as fsspec takes them.
storage_url = SETTINGS.declare("STORAGE_URL", _storage_folder, "")
storage_options = SETTINGS.mapping("STORAGE_OPTIONS", {})
# Direct export (the query's answer streamed into Parquet by the worker) unless false:
# then the engine writes the files itself (Trino's system.unload) and is polled.
direct_export = SETTINGS.flag("DIRECT_EXPORT", True)
# Trino/Starburst, for mapping entities that are queries: empty URL means no Trino.
trino_url = SETTINGS.text("TRINO_URL", "")
trino_user = SETTINGS.text("TRINO_USER", "conveyor")
trino_password = SETTINGS.text("TRINO_PASSWORD", "")
trino_verify = SETTINGS.flag("TRINO_VERIFY", True)
trino_request_timeout_seconds = SETTINGS.number("TRINO_REQUEST_TIMEOUT_SECONDS", 30.0)
# Sent with every Trino query, for the resource groups' routing and its audit.
client_tags = SETTINGS.strings("CLIENT_TAGS", ["conveyor-export"])
source = SETTINGS.text("SOURCE", "conveyor-export-worker")
# The worker's connection for datasets (a read-only role on the exported tables); empty:
# the app's own database, as in development.
postgres_url = SETTINGS.text("POSTGRES_URL", "")
# The control plane's bearer token for export workers; empty refuses every worker.
worker_token = SETTINGS.text("WORKER_TOKEN", "")
# The reconciliation: a claim with no word from its worker this long goes back to
# pending; a submitted job not updated this long is checked with the engine.
claim_timeout_seconds = SETTINGS.integer("CLAIM_TIMEOUT_SECONDS", 600)
stale_submitted_seconds = SETTINGS.integer("STALE_SUBMITTED_SECONDS", 1800)
reconcile_every_seconds = SETTINGS.number("RECONCILE_EVERY_SECONDS", 5.0)
# An export worker's report: up to 10,000 file paths of 1,200 characters (the internal
# API's body limit; exports/control_plane.py).
report_max_bytes = SETTINGS.integer("REPORT_MAX_BYTES", 16 * 1024 * 1024)
# How long a worker holds the jobs it fetched for one poll before another may.
poll_lease_seconds = SETTINGS.integer("POLL_LEASE_SECONDS", 60)
# The most jobs one claim and one poll pass may take.
claim_limit = SETTINGS.integer("CLAIM_LIMIT", 10)
poll_limit = SETTINGS.integer("POLL_LIMIT", 50)
