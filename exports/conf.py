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
# The bearer token export workers present to the engine's remote-worker API: the
# credential "exports" of JOBS_REMOTE_WORKERS unless that is configured apart.
worker_token = SETTINGS.text("WORKER_TOKEN", "")
# A submitted UNLOAD not polled this long (no export worker running) is asked about on
# Trino by the reconciliation.
stale_submitted_seconds = SETTINGS.integer("STALE_SUBMITTED_SECONDS", 1800)
# The most jobs (exports and polls) one claim of a worker may take.
claim_limit = SETTINGS.integer("CLAIM_LIMIT", 10)
