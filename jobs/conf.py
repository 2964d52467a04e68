"""Engine settings, read lazily from Django settings (never at import time).

Each default lives here alone: a deployment overrides one with ``JOBS_<NAME>`` in its
settings (project/settings.py sets it only when the environment variable is set)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings

# A worker row not refreshed for this long belongs to a dead process.
WORKER_STALE_SECONDS = 30

DEFAULTS: dict[str, Any] = {
    # Seconds without a heartbeat before a running job is presumed dead and rescued.
    "LEASE_SECONDS": 6,
    # How often a worker renews its leases (and flushes throttled progress at 4× that).
    "HEARTBEAT_SECONDS": 1.0,
    # How long an idle worker waits for a NOTIFY before polling anyway (safety net).
    "POLL_SECONDS": 1.0,
    # How often some worker runs the reaper (one at a time, by advisory lock).
    "REAPER_SECONDS": 2.0,
    # Jobs taken per claim; unstarted ones go back if the batch runs long. A worker
    # starts here, then claims as many as its recent jobs say it starts within a quarter
    # of CLAIM_HOLD_SECONDS: fewer for slow jobs, up to CLAIM_BATCH_MAX for fast ones.
    "CLAIM_BATCH": 20,
    "CLAIM_BATCH_MAX": 50,
    # Seconds a claimed batch may wait before its unstarted jobs are handed back.
    "CLAIM_HOLD_SECONDS": 1.0,
    # Fast atomic jobs (each under GROUP_FAST_JOB_SECONDS last time its type ran) of one
    # batch share a transaction: their successes commit together, at most this many
    # seconds and GROUP_COMMIT_JOBS jobs after the first. A commit waits for the WAL
    # flush, which takes longer than a small job; 0 gives every job its own commit.
    "GROUP_COMMIT_SECONDS": 0.05,
    # A group's per-commit work (lock, record, commit) is shared by this many jobs. Each
    # job is a savepoint; PostgreSQL caches 64 subtransaction ids per backend, and a group
    # of handlers that write (each takes one, plus one per savepoint of its own) past
    # that makes other sessions' snapshots slower until the group commits. Lower it for
    # such handlers; read-only or no-op ones take none.
    "GROUP_COMMIT_JOBS": 50,
    "GROUP_FAST_JOB_SECONDS": 0.005,
    # A worker keeps its database connection between batches (a reconnect costs more
    # than a batch of small jobs) and replaces it after this many seconds or an error.
    "WORKER_CONNECTION_MAX_AGE": 300.0,
    # The engine's per-batch statements run as prepared statements (see jobs.sql.execute).
    "PREPARED_STATEMENTS": True,
    # Seconds a handler may run before the worker interrupts it (a handler may declare
    # its own), and how long an interrupted handler may take to stop before its worker
    # process records the attempt as failed and exits, to be replaced by a fresh one.
    "HANDLER_TIMEOUT_SECONDS": 1800.0,
    "STUCK_GRACE_SECONDS": 30.0,
    # The share of the live workers one tenant's jobs may hold before the claims prefer
    # every other tenant's due jobs to theirs (at least one worker each). Work-conserving:
    # past its share a tenant still gets the workers nobody else needs. 1 turns it off.
    "TENANT_SHARE": 0.5,
    # Queues this process's workers serve; empty for all.
    "QUEUES": [],
    # A file whose presence makes this process's workers stop claiming: they finish the
    # job that is running, hand back the rest of their batch and wait for their stop
    # request. A pod's preStop hook creates it, so that claims end before SIGTERM does
    # anything else. Empty: no such file.
    "DRAIN_FILE": "",
    # How long finished jobs are kept, per final state.
    "RETENTION": {
        "succeeded": timedelta(days=7),
        "cancelled": timedelta(days=7),
        "failed": timedelta(days=30),
    },
}


def get(name: str) -> Any:
    """A setting as the deployment gave it: what it holds is for its reader to convert."""
    return getattr(settings, f"JOBS_{name}", DEFAULTS[name])


def lease_seconds() -> float:
    return float(get("LEASE_SECONDS"))


def heartbeat_seconds() -> float:
    return float(get("HEARTBEAT_SECONDS"))


def poll_seconds() -> float:
    return float(get("POLL_SECONDS"))


def reaper_seconds() -> float:
    return float(get("REAPER_SECONDS"))


def claim_batch() -> int:
    return int(get("CLAIM_BATCH"))


def claim_batch_max() -> int:
    return int(get("CLAIM_BATCH_MAX"))


def claim_hold_seconds() -> float:
    return float(get("CLAIM_HOLD_SECONDS"))


def group_commit_seconds() -> float:
    return float(get("GROUP_COMMIT_SECONDS"))


def group_commit_jobs() -> int:
    return int(get("GROUP_COMMIT_JOBS"))


def group_fast_job_seconds() -> float:
    return float(get("GROUP_FAST_JOB_SECONDS"))


def worker_connection_max_age() -> float:
    return float(get("WORKER_CONNECTION_MAX_AGE"))


def prepared_statements() -> bool:
    return bool(get("PREPARED_STATEMENTS"))


def handler_timeout_seconds() -> float:
    return float(get("HANDLER_TIMEOUT_SECONDS"))


def stuck_grace_seconds() -> float:
    return float(get("STUCK_GRACE_SECONDS"))


def drain_file() -> str:
    return str(get("DRAIN_FILE") or "")


def tenant_share() -> float:
    return float(get("TENANT_SHARE"))


def queues() -> list[str]:
    return list(get("QUEUES"))


def retention() -> dict[str, timedelta]:
    configured: dict[str, timedelta] = dict(DEFAULTS["RETENTION"])
    configured.update(get("RETENTION"))
    return configured
