"""Engine settings, read lazily from Django settings (never at import time)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings

DEFAULTS: dict[str, object] = {
    # Seconds without a heartbeat before a running job is presumed dead and rescued.
    "LEASE_SECONDS": 6,
    # How often a worker renews its leases (and flushes throttled progress at 4× that).
    "HEARTBEAT_SECONDS": 1.0,
    # How long an idle worker waits for a NOTIFY before polling anyway (safety net).
    "POLL_SECONDS": 1.0,
    # How often some worker runs the reaper (one at a time, by advisory lock).
    "REAPER_SECONDS": 2.0,
    # Jobs taken per claim; unstarted ones go back if the batch runs long.
    "CLAIM_BATCH": 20,
    # Seconds a claimed batch may wait before its unstarted jobs are handed back.
    "CLAIM_HOLD_SECONDS": 1.0,
    # Queues this process's workers serve; empty for all.
    "QUEUES": [],
    # How long finished jobs are kept, per final state.
    "RETENTION": {"succeeded": timedelta(days=7), "cancelled": timedelta(days=7),
                  "failed": timedelta(days=30)},
}


def get(name: str) -> object:
    return getattr(settings, f"JOBS_{name}", DEFAULTS[name])


def lease_seconds() -> float:
    return float(get("LEASE_SECONDS"))  # type: ignore[arg-type]


def heartbeat_seconds() -> float:
    return float(get("HEARTBEAT_SECONDS"))  # type: ignore[arg-type]


def poll_seconds() -> float:
    return float(get("POLL_SECONDS"))  # type: ignore[arg-type]


def reaper_seconds() -> float:
    return float(get("REAPER_SECONDS"))  # type: ignore[arg-type]


def claim_batch() -> int:
    return int(get("CLAIM_BATCH"))  # type: ignore[arg-type]


def claim_hold_seconds() -> float:
    return float(get("CLAIM_HOLD_SECONDS"))  # type: ignore[arg-type]


def queues() -> list[str]:
    return list(get("QUEUES"))  # type: ignore[call-overload]


def retention() -> dict[str, timedelta]:
    configured = dict(DEFAULTS["RETENTION"])  # type: ignore[call-overload]
    configured.update(get("RETENTION"))  # type: ignore[call-overload]
    return configured
