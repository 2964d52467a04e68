"""Engine settings, read from Django settings each time (never at import time).

Each is declared once here, with its default and meaning; a deployment overrides one
with ``JOBS_<NAME>`` in its settings (project/settings.py reads each from the environment)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from appsettings import AppSettings

# A worker row not refreshed for this long belongs to a dead process.
WORKER_STALE_SECONDS = 30

SETTINGS = AppSettings("JOBS_")
get = SETTINGS.get

# Seconds without a heartbeat before a running job is presumed dead and rescued.
lease_seconds = SETTINGS.number("LEASE_SECONDS", 6)
# How often a worker renews its leases (and flushes throttled progress at 4× that).
heartbeat_seconds = SETTINGS.number("HEARTBEAT_SECONDS", 1.0)
# How long an idle worker waits for a NOTIFY before polling anyway (safety net).
poll_seconds = SETTINGS.number("POLL_SECONDS", 1.0)
# How often some worker runs the reaper (one at a time, by advisory lock).
reaper_seconds = SETTINGS.number("REAPER_SECONDS", 2.0)
# Jobs taken per claim; unstarted ones go back if the batch runs long. A worker starts
# here, then claims as many as its recent jobs say it starts within a quarter of
# CLAIM_HOLD_SECONDS: fewer for slow jobs, up to CLAIM_BATCH_MAX for fast ones.
claim_batch = SETTINGS.integer("CLAIM_BATCH", 20)
claim_batch_max = SETTINGS.integer("CLAIM_BATCH_MAX", 50)
# Seconds a claimed batch may wait before its unstarted jobs are handed back.
claim_hold_seconds = SETTINGS.number("CLAIM_HOLD_SECONDS", 1.0)
# Fast atomic jobs (each under GROUP_FAST_JOB_SECONDS last time its type ran) of one
# batch share a transaction: their successes commit together, at most this many seconds
# and GROUP_COMMIT_JOBS jobs after the first. A commit waits for the WAL flush, which
# takes longer than a small job; 0 gives every job its own commit.
group_commit_seconds = SETTINGS.number("GROUP_COMMIT_SECONDS", 0.05)
# A group's per-commit work (lock, record, commit) is shared by this many jobs. Each job
# is a savepoint; PostgreSQL caches 64 subtransaction ids per backend, and a group of
# handlers that write (each takes one, plus one per savepoint of its own) past that
# makes other sessions' snapshots slower until the group commits. Lower it for such
# handlers; read-only or no-op ones take none.
group_commit_jobs = SETTINGS.integer("GROUP_COMMIT_JOBS", 50)
group_fast_job_seconds = SETTINGS.number("GROUP_FAST_JOB_SECONDS", 0.005)
# A worker keeps its database connection between batches (a reconnect costs more than a
# batch of small jobs) and replaces it after this many seconds or an error.
worker_connection_max_age = SETTINGS.number("WORKER_CONNECTION_MAX_AGE", 300.0)
# The engine's per-batch statements run as prepared statements (see jobs.sql.execute).
prepared_statements = SETTINGS.flag("PREPARED_STATEMENTS", True)
# Seconds a handler may run before the worker interrupts it (a handler may declare its
# own), and how long an interrupted handler may take to stop before its worker process
# records the attempt as failed and exits, to be replaced by a fresh one.
handler_timeout_seconds = SETTINGS.number("HANDLER_TIMEOUT_SECONDS", 1800.0)
stuck_grace_seconds = SETTINGS.number("STUCK_GRACE_SECONDS", 30.0)
# The share of the live workers one tenant's jobs may hold before the claims prefer
# every other tenant's due jobs to theirs (at least one worker each). Work-conserving:
# past its share a tenant still gets the workers nobody else needs. 1 turns it off.
tenant_share = SETTINGS.number("TENANT_SHARE", 0.5)
# Queues this process's workers serve; empty for all.
queues = SETTINGS.strings("QUEUES", [])
# A file whose presence makes this process's workers stop claiming: they finish the job
# that is running, hand back the rest of their batch and wait for their stop request. A
# pod's preStop hook creates it, so that claims end before SIGTERM does anything else.
# Empty: no such file.
drain_file = SETTINGS.text("DRAIN_FILE", "")
# Schedules a deployment retimes or turns off, by name: {"market-daily-batch": {"cron":
# "*/10 * * * *"}} or {"exports-reconcile": None}. The schedules themselves are declared by
# their handlers (jobs.Cron); the system check jobs.E002 refuses a name none declares.
schedule_overrides = SETTINGS.given("SCHEDULE_OVERRIDES", {})
# Remote workers' credentials, by name: {"exports": {"token": "<32+ characters>",
# "queues": ["exports"]}}. A remote worker sends its token as a bearer token to the
# internal API (jobs.remote) and may claim only the remote job types of its queues.
remote_workers = SETTINGS.given("REMOTE_WORKERS", {})
# Modules besides each app's handlers.py that register handlers (users' own code, test
# suites): JobsConfig.ready() imports them.
handler_modules = SETTINGS.strings("HANDLER_MODULES", [])


def _every_state(configured: Any) -> dict[str, timedelta]:
    """The retention of each final state: a deployment's, else the default's."""
    return {**DEFAULT_RETENTION, **configured}


# How long finished jobs are kept, per final state; a deployment may name only some.
DEFAULT_RETENTION = {
    "succeeded": timedelta(days=7),
    "cancelled": timedelta(days=7),
    "failed": timedelta(days=30),
}
retention = SETTINGS.declare("RETENTION", _every_state, DEFAULT_RETENTION)
