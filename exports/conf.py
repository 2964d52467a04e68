"""Settings of the exports app, read lazily from Django settings (``EXPORTS_*``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Where snapshots' files go: a local folder (default: VAR_DIR/exports) or an fsspec URL
    # (s3://bucket/prefix, gs://bucket/prefix), and the filesystem's options (credentials,
    # endpoint_url …) as fsspec takes them.
    "STORAGE_URL": "",
    "STORAGE_OPTIONS": {},
    # Direct export (the query's answer streamed into Parquet by the worker) unless false:
    # then the engine writes the files itself (Trino's system.unload) and is polled.
    "DIRECT_EXPORT": True,
    # Trino/Starburst, for mapping entities that are queries: empty URL means no Trino.
    "TRINO_URL": "",
    "TRINO_USER": "conveyor",
    "TRINO_PASSWORD": "",
    "TRINO_VERIFY": True,
    "TRINO_REQUEST_TIMEOUT_SECONDS": 30.0,
    # Sent with every Trino query, for the resource groups' routing and its audit.
    "CLIENT_TAGS": ["conveyor-export"],
    "SOURCE": "conveyor-export-worker",
    # The worker's connection for datasets (a read-only role on the exported tables);
    # empty: the app's own database, as in development.
    "POSTGRES_URL": "",
    # The control plane's bearer token for export workers; empty refuses every worker.
    "WORKER_TOKEN": "",
    # The reconciliation: a claim with no word from its worker this long goes back to
    # pending; a submitted job not updated this long is checked with the engine.
    "CLAIM_TIMEOUT_SECONDS": 600,
    "STALE_SUBMITTED_SECONDS": 1800,
    "RECONCILE_EVERY_SECONDS": 5.0,
    # How long a worker holds the jobs it fetched for one poll before another may.
    "POLL_LEASE_SECONDS": 60,
    # The most jobs one claim and one poll pass may take.
    "CLAIM_LIMIT": 10,
    "POLL_LIMIT": 50,
}


def get(name: str) -> Any:
    return getattr(settings, f"EXPORTS_{name}", DEFAULTS[name])


def storage_url() -> str:
    return get("STORAGE_URL") or str(settings.VAR_DIR / "exports")
