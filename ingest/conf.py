"""Settings of the ingest app, read from Django settings each time (``INGEST_*``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jobs import AppSettings

MB = 1024 * 1024

SETTINGS = AppSettings("INGEST_")
get = SETTINGS.get

# Where hooks run: "local" (a subprocess on the worker's host, the default without a
# cluster) or "kubernetes" (a batch/v1 Job per hook and batch).
hook_runner = SETTINGS.text("HOOK_RUNNER", "local")
# The cluster, for the "kubernetes" runner: a kubeconfig file and context (empty: the
# in-cluster service account), the namespace the Jobs go to, how long a hook's Pod may
# wait to be scheduled before the attempt counts as cluster pressure, how long a
# finished Job stays for inspection, and each API call's time bound.
kubeconfig = SETTINGS.text("KUBECONFIG", "")
kube_context = SETTINGS.text("KUBE_CONTEXT", "")
kube_namespace = SETTINGS.text("KUBE_NAMESPACE", "conveyor-hooks")
kube_schedule_timeout_seconds = SETTINGS.number("KUBE_SCHEDULE_TIMEOUT_SECONDS", 120.0)
kube_ttl_seconds_after_finished = SETTINGS.integer("KUBE_TTL_SECONDS_AFTER_FINISHED", 3600)
kube_request_timeout_seconds = SETTINGS.number("KUBE_REQUEST_TIMEOUT_SECONDS", 10.0)
kube_service_account = SETTINGS.text("KUBE_SERVICE_ACCOUNT", "")
# The hook catalogue's bounds: the most CPU and memory (Kubernetes quantities) an entry
# may request or limit, its longest time limit, the JSON size of one hook's parameters,
# and the bytes of a hook's whole argument list and environment once its parameters are
# in them (the kernel refuses an exec far above this).
hook_max_cpu = SETTINGS.text("HOOK_MAX_CPU", "4")
hook_max_memory = SETTINGS.text("HOOK_MAX_MEMORY", "16Gi")
hook_max_timeout_seconds = SETTINGS.integer("HOOK_MAX_TIMEOUT_SECONDS", 7200)
hook_max_parameters_bytes = SETTINGS.integer("HOOK_MAX_PARAMETERS_BYTES", 8 * 1024)
hook_max_argument_bytes = SETTINGS.integer("HOOK_MAX_ARGUMENT_BYTES", 64 * 1024)
# The namespace Conveyor itself runs in (its pods' POD_NAMESPACE, from the downward
# API): hooks must never run there (system check ingest.E101).
app_namespace = SETTINGS.text("APP_NAMESPACE", "")
# What a hook's Pod runs as (user, group and fsGroup, never 0; system check ingest.E102
# says what is wrong with another value), and the size of the emptyDir mounted at /tmp,
# its only writable place (the root filesystem is read-only).
kube_run_as_user = SETTINGS.given("KUBE_RUN_AS_USER", 65534)
kube_scratch_limit = SETTINGS.text("KUBE_SCRATCH_LIMIT", "1Gi")
# Local hooks: the PATH they get (this interpreter's directory first, so that
# ``python -m ingest.hookkit...`` finds Conveyor's Python), the user they run as when the
# worker is root (empty: the worker's own user), the largest file they may write (their
# output included) and how many files they may hold open.
hook_path = SETTINGS.text(
    "HOOK_PATH", os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
)
hook_user = SETTINGS.text("HOOK_USER", "nobody")
hook_max_file_bytes = SETTINGS.integer("HOOK_MAX_FILE_BYTES", 64 * MB)
hook_max_open_files = SETTINGS.integer("HOOK_MAX_OPEN_FILES", 256)
# Processes the hook user may run at once (a root worker's hooks only: a worker that is
# not root shares its user with its hooks).
hook_max_processes = SETTINGS.integer("HOOK_MAX_PROCESSES", 128)
# Seconds between two looks at a running hook: the first at first, then a tenth of the
# hook's age since its launch, up to the most.
hook_poll_seconds = SETTINGS.number("HOOK_POLL_SECONDS", 2.0)
hook_poll_max_seconds = SETTINGS.number("HOOK_POLL_MAX_SECONDS", 10.0)
# Characters of a hook's log kept on its batch.
hook_log_tail_chars = SETTINGS.integer("HOOK_LOG_TAIL_CHARS", 4000)
# The hook runner's circuit breaker, one per runner target and tenant: this many
# transient failures of one tenant's hooks on a target within the window open it; a
# probe goes through after the cool-down, which doubles on each failed probe up to its
# cap.
breaker_threshold = SETTINGS.integer("BREAKER_THRESHOLD", 5)
breaker_window_seconds = SETTINGS.number("BREAKER_WINDOW_SECONDS", 60.0)
breaker_cooldown_seconds = SETTINGS.number("BREAKER_COOLDOWN_SECONDS", 60.0)
breaker_max_cooldown_seconds = SETTINGS.number("BREAKER_MAX_COOLDOWN_SECONDS", 300.0)
# The launch window: how many of a tenant's launched hooks may wait for room on a target
# at once. Each launch that gets room widens it by one (up to the maximum), each
# transient failure halves it; a launch beyond it waits QUEUE_WAIT_SECONDS and asks again.
max_launch_window = SETTINGS.integer("MAX_LAUNCH_WINDOW", 1024)
queue_wait_seconds = SETTINGS.number("QUEUE_WAIT_SECONDS", 10.0)
# Records per batch unless a source says otherwise, and the most a source may ask.
batch_records = SETTINGS.integer("BATCH_RECORDS", 1000)
max_batch_records = SETTINGS.integer("MAX_BATCH_RECORDS", 10_000)
# Bounds on what one batch of a source may bring: its size, and the session state it
# hands to the next batch.
max_batch_bytes = SETTINGS.integer("MAX_BATCH_BYTES", 50 * MB)
max_session_bytes = SETTINGS.integer("MAX_SESSION_BYTES", 16 * 1024)
# HTTP JSON sources: seconds to connect, seconds for the whole fetch.
http_connect_seconds = SETTINGS.number("HTTP_CONNECT_SECONDS", 10.0)
http_deadline_seconds = SETTINGS.number("HTTP_DEADLINE_SECONDS", 60.0)
# File sources may read only their tenant's directory under these roots (local
# directories or fsspec URLs, a list or one comma-separated string, which their reader
# checks): <root>/<tenant slug>/.
file_roots = SETTINGS.given("FILE_ROOTS", [])
# Scrape syncs: the bytes of a sync's JSON body (50,000 references of about 600 bytes
# each: the scraper views' body limit), and the references one call may bring (more is a
# 400 naming the limit).
scrape_max_bytes = SETTINGS.integer("SCRAPE_MAX_BYTES", 32 * MB)
scrape_max_references = SETTINGS.integer("SCRAPE_MAX_REFERENCES", 50_000)
# Queueing a sync's ingestions: attempts on transient errors, the backoff base (each wait
# is base × 2^(attempt − 1); 0 keeps the call fast), and how long it may wait for the
# references' rows before that counts as a transient error.
handoff_max_attempts = SETTINGS.integer("HANDOFF_MAX_ATTEMPTS", 3)
handoff_backoff_base_seconds = SETTINGS.number("HANDOFF_BACKOFF_BASE_SECONDS", 0.0)
handoff_lock_timeout_ms = SETTINGS.integer("HANDOFF_LOCK_TIMEOUT_MS", 5000)
