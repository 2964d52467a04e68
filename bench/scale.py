"""Scale-out: 1, 2 and 4 cluster processes draining one backlog on one PostgreSQL.

    .venv/bin/python bench/scale.py [--jobs 20000] [--processes 1,2,4] [--workers-per-process 2]

On a scratch database (created, migrated and dropped here, on the project's server), for
each process count: that many ``manage.py qcluster`` processes (the cluster a pod runs,
``JOBS_WORKERS`` engine workers each) start, then ``--jobs`` no-op jobs are committed at
once and drained. Printed per count:

- drain jobs/s: jobs finished between the first and the last finish, and per process
  (every worker is registered before the backlog is committed, in one transaction);
- lock waits: the share of 20 ms samples of ``pg_stat_activity`` in which some session
  of the scratch database waited on a heavyweight lock (``wait_event_type = 'Lock'``),
  the most sessions seen waiting at once, and what they waited on (``wait_event``:
  ``transactionid`` is a row another transaction changed and has not committed);
- SKIP LOCKED misses: claims (logged in each worker by ``bench/claim_log.py``) that took
  fewer jobs than they asked for while more than enough due jobs for every worker were
  left: rows other claimers held were skipped, not waited for. Their share of claims;
- claims and jobs per claim; the transactions the server committed per job;
- CPU per job of the PostgreSQL server's processes and of the cluster's processes
  (psutil, during the drain): jobs/s one core of each can carry.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import setup_django  # noqa: E402
from bench.engine import kill_group, machine, scratch_database  # noqa: E402

PYTHON = sys.executable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--processes", default="1,2,4", help="comma-separated counts")
    parser.add_argument("--workers-per-process", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per drain")
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    setup_django("bench.settings")
    from django.db import connection

    rows = []
    with scratch_database("bench_scale") as version:
        database = connection.settings_dict["NAME"]
        for count in counts:
            rows.append(drain(database, count, args))
            print(f"  {count} process(es): {rows[-1]['drain']:,.0f} jobs/s", file=sys.stderr, flush=True)
    print(table(rows, args, version))
    return 0


def drain(database: str, processes: int, args: argparse.Namespace) -> dict:
    from django.db import connection, transaction
    from django.db.models import Max, Min

    from jobs import engine
    from jobs.models import Job, Worker

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job, jobs_jobevent, jobs_worker CASCADE")
        cursor.execute("VACUUM ANALYZE jobs_job")
    logs = Path(tempfile.mkdtemp(prefix="conveyor-scale-"))
    workers = processes * args.workers_per_process
    with clusters(processes, args, database, logs):
        # Every worker is up before the backlog appears at once (one commit): start-up
        # is not part of the drain.
        wait(lambda: Worker.objects.count() >= workers, 120, f"{workers} workers to register", logs)
        commits_before = committed(database)
        with transaction.atomic():
            for start in range(0, args.jobs, 5_000):
                engine.enqueue_many("bench.noop", [{}] * min(5_000, args.jobs - start))
        committed_at = time.time()
        cpu_before = cpu_seconds()
        with sampling_locks(database) as locks:
            wait(lambda: Job.objects.filter(state=Job.State.SUCCEEDED).count() >= args.jobs,
                 args.timeout, f"{processes} process(es) to drain", logs)
        cpu = {side: cpu_seconds()[side] - cpu_before[side] for side in cpu_before}
        commits = committed(database) - commits_before
        time.sleep(1.5)  # idle workers claim once more, which writes their claim logs
    span = Job.objects.aggregate(first=Min("finished_at"), last=Max("finished_at"))
    seconds = (span["last"] - span["first"]).total_seconds()
    finishes = sorted(t.timestamp() for t in Job.objects.values_list("finished_at", flat=True))
    # The idle claims before the backlog existed are not misses.
    claims = [tuple(record) for path in logs.glob("*.json") for record in json.loads(path.read_text())
              if record[0] >= committed_at]
    misses = sum(1 for at, asked, got in claims
                 if got < asked and args.jobs - bisect.bisect_right(finishes, at) > 2 * asked * workers)
    taken = sum(got for _, _, got in claims)
    return {"processes": processes, "workers": workers, "seconds": seconds,
            "drain": args.jobs / seconds if seconds else 0.0,
            "lock_share": locks["waiting"] / max(1, locks["samples"]), "lock_max": locks["max"],
            "lock_events": ", ".join(f"{event} {n}" for event, n in locks["events"].most_common(3)),
            "claims": len(claims), "per_claim": taken / max(1, sum(1 for c in claims if c[2])),
            "misses": misses, "commits_per_job": commits / args.jobs,
            "pg_us": 1e6 * cpu["postgres"] / args.jobs, "workers_us": 1e6 * cpu["workers"] / args.jobs}


def cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by the PostgreSQL server's processes and by the cluster
    processes (``manage.py qcluster`` and their children)."""
    import psutil

    used = {"postgres": 0.0, "workers": 0.0}
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is None:
            continue
        if proc.info["name"] == "postgres":
            used["postgres"] += times.user + times.system
        elif "qcluster" in " ".join(proc.info["cmdline"] or ()):
            used["workers"] += times.user + times.system
    return used


def wait(done, seconds: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {seconds:g} s waiting for {what}; logs in {logs}")
        time.sleep(0.1)


@contextlib.contextmanager
def clusters(processes: int, args: argparse.Namespace, database: str, logs: Path) -> Iterator[None]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", "BENCH_DB_NAME": database,
           "JOBS_WORKERS": str(args.workers_per_process), "BENCH_CLAIM_LOG_DIR": str(logs),
           "JOBS_HANDLER_MODULES": "bench.handlers,bench.claim_log", "PYTHONPATH": str(ROOT)}
    started = []
    try:
        for n in range(processes):
            with (logs / f"cluster-{n}.log").open("ab") as log:
                started.append(subprocess.Popen([PYTHON, "manage.py", "qcluster"], cwd=ROOT, env=env,
                                                stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True))
        yield
    finally:
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            kill_group(proc.pid)


@contextlib.contextmanager
def sampling_locks(database: str) -> Iterator[dict]:
    """Samples, every 20 ms on a connection of its own, how many sessions of ``database``
    wait on a heavyweight lock."""
    import psycopg
    from django.db import connection

    params = {k: v for k, v in connection.get_connection_params().items()
              if k in ("host", "port", "user", "password", "dbname")}
    figures = {"samples": 0, "waiting": 0, "max": 0, "events": Counter()}
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(**params, autocommit=True) as conn:
            while not stop.wait(0.02):
                events = [event for (event,) in conn.execute(
                    "SELECT wait_event FROM pg_stat_activity WHERE datname = %s "
                    "AND wait_event_type = 'Lock'", [database])]
                waiting = len(events)
                figures["events"].update(events)
                figures["samples"] += 1
                figures["waiting"] += bool(waiting)
                figures["max"] = max(figures["max"], waiting)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield figures
    finally:
        stop.set()
        thread.join(5)


def committed(database: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [database])
        return cursor.fetchone()[0]


def table(rows: list[dict], args: argparse.Namespace, version: str) -> str:
    m = machine()
    header = ["processes", "workers", "seconds", "drain jobs/s", "per process", "lock-wait samples",
              "max waiting", "waited on (session-samples)", "claims", "jobs/claim",
              "SKIP LOCKED misses", "commits/job", "PG CPU µs/job", "workers CPU µs/job"]
    cells = [[str(r["processes"]), str(r["workers"]), f"{r['seconds']:.1f}", f"{r['drain']:,.0f}",
              f"{r['drain'] / r['processes']:,.0f}", f"{100 * r['lock_share']:.1f} %",
              str(r["lock_max"]), r["lock_events"] or "-",
              f"{r['claims']:,}", f"{r['per_claim']:.1f}",
              f"{r['misses']:,} ({100 * r['misses'] / max(1, r['claims']):.1f} %)",
              f"{r['commits_per_job']:.2f}", f"{r['pg_us']:.0f}", f"{r['workers_us']:.0f}"]
             for r in rows]
    widths = [max(len(c) for c in col) for col in zip(header, *cells, strict=False)]
    lines = [f"Scale-out: {args.jobs:,} no-op jobs per row, {args.workers_per_process} engine "
             f"workers per cluster process; {m['nproc']} cores ({m['cpu']}), PostgreSQL {version}", ""]
    for row in [header, ["-" * w for w in widths], *cells]:
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=False)))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
