"""Scale-out: 1, 2 and 4 cluster processes draining one backlog on one PostgreSQL.

    .venv/bin/python bench/scale.py [--jobs 20000] [--processes 1,2,4] [--workers-per-process 2]
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/scale.py

On a scratch database (created, migrated and dropped here, on the project's server: the
embedded PostgreSQL, or ``DATABASE_URL``), for each process count: that many
``manage.py qcluster`` processes start, each with ``JOBS_WORKERS`` engine workers. The
cluster is what a pod runs, and it gives every engine worker an OS process of its own;
``jobs_worker --concurrency N`` would run them as threads of one process, sharing one
GIL, which measures the interpreter rather than the claims. Once every worker has
registered, ``--jobs`` no-op jobs are committed at once (one transaction) and drained.
Printed per count:

- seconds and drain jobs/s: from the first job's finish to the last's (start-up left
  out), in all and per cluster process;
- lock waits: the share of 20 ms samples of ``pg_stat_activity`` (a session of the bench
  of its own) in which some session of the scratch database waited on a heavyweight
  lock (``wait_event_type = 'Lock'``), the most sessions seen waiting at once, and on
  what (``object``: the database-wide lock a transaction that sent NOTIFY takes while it
  commits; ``transactionid``: a row another transaction changed and has not committed);
- deadlocks / conflicts: the change in ``pg_stat_database`` over the drain (``conflicts``
  counts queries a standby cancelled during recovery, so on a primary it stays 0);
- SKIP LOCKED misses: claims, logged in each worker by ``bench/claim_log.py``, that took
  fewer jobs than they asked for while more than twice a full claim of every worker was
  left unfinished (so due jobs were pending: rows other claimers held were skipped, not
  waited for). Counted in the workers because ``pg_stat_statements``, which would count
  the claim statements and their rows on the server, works only when the server was
  started with it in ``shared_preload_libraries``;
- claims and jobs per non-empty claim; transactions the scratch database committed per
  job (the workers' statistics reach ``pg_stat_database`` within a second or so: read
  after the idle workers' next claims);
- CPU seconds over the drain (psutil), and per job: of the PostgreSQL backends serving
  the cluster's sessions (the bench's own two are left out; so are the server's shared
  processes, which other databases use too), and of the cluster's process groups.

Every cluster process runs in a process group of its own: the group is stopped (SIGTERM,
then SIGKILL) whenever the bench ends, Ctrl-C included, and the scratch database dropped.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import shutil
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
SAMPLER = "bench-scale-sampler"  # the lock sampler's application_name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--processes", default="1,2,4", help="comma-separated counts")
    parser.add_argument("--workers-per-process", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per drain")
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupted)
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


def interrupted(signum: int, frame: object) -> None:
    """Unwind through the finally blocks that stop the clusters and drop the database;
    a second Ctrl-C must not cut them short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(143)


def drain(database: str, processes: int, args: argparse.Namespace) -> dict:
    from django.db import connection
    from django.db.models import Max, Min

    from jobs.models import Job

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job, jobs_jobevent, jobs_worker CASCADE")
        cursor.execute("VACUUM ANALYZE jobs_job")
    logs = Path(tempfile.mkdtemp(prefix="conveyor-scale-"))
    workers = processes * args.workers_per_process
    try:
        with clusters(processes, args, database, logs) as groups:
            run = backlog(database, workers, groups, args, logs)
    except KeyboardInterrupt:
        shutil.rmtree(logs, ignore_errors=True)
        raise
    span = Job.objects.aggregate(first=Min("finished_at"), last=Max("finished_at"))
    seconds = (span["last"] - span["first"]).total_seconds()
    finishes = sorted(t.timestamp() for t in Job.objects.values_list("finished_at", flat=True))
    # The idle claims before the backlog existed are not misses.
    claims = [
        tuple(record)
        for path in logs.glob("*.json")
        for record in json.loads(path.read_text())
        if record[0] >= run["committed_at"]
    ]
    shutil.rmtree(logs, ignore_errors=True)
    misses = sum(
        1
        for at, asked, got in claims
        if got < asked and args.jobs - bisect.bisect_right(finishes, at) > 2 * asked * workers
    )
    taken = sum(got for _, _, got in claims)
    locks, stats, cpu = run["locks"], run["stats"], run["cpu"]
    return {
        "processes": processes,
        "workers": workers,
        "jobs": args.jobs,
        "seconds": seconds,
        "drain": args.jobs / seconds if seconds else 0.0,
        "lock_share": locks["waiting"] / max(1, locks["samples"]),
        "lock_max": locks["max"],
        "lock_events": ", ".join(f"{event} {n}" for event, n in locks["events"].most_common(3)),
        "deadlocks": stats["deadlocks"],
        "conflicts": stats["conflicts"],
        "claims": len(claims),
        "per_claim": taken / max(1, sum(1 for c in claims if c[2])),
        "misses": misses,
        "commits_per_job": stats["xact_commit"] / args.jobs,
        "pg_cpu": cpu["postgres"],
        "cluster_cpu": cpu["cluster"],
    }


def backlog(database: str, workers: int, groups: list[int], args: argparse.Namespace, logs: Path) -> dict:
    """With the clusters running: commit the backlog, sample while it drains."""
    from django.db import transaction

    from jobs import engine
    from jobs.models import Job, Worker

    # Every worker is up before the backlog appears at once (one commit): start-up is
    # not part of the drain.
    wait(lambda: Worker.objects.count() >= workers, 120, f"{workers} workers to register", logs)
    time.sleep(1.5)  # the start-up's statistics reach pg_stat_database
    stats_before = database_stats(database)
    cpu_before = cpu_seconds(database, groups)
    with transaction.atomic():
        for start in range(0, args.jobs, 5_000):
            engine.enqueue_many("bench.noop", [{}] * min(5_000, args.jobs - start))
    committed_at = time.time()
    with sampling_locks(database) as locks:
        wait(
            lambda: Job.objects.filter(state=Job.State.SUCCEEDED).count() >= args.jobs,
            args.timeout,
            f"{len(groups)} process(es) to drain",
            logs,
        )
    cpu_after = cpu_seconds(database, groups)
    # Idle workers claim about once a second: that writes their claim logs and flushes
    # their statistics to pg_stat_database.
    time.sleep(2.5)
    stats_after = database_stats(database)
    return {
        "committed_at": committed_at,
        "locks": locks,
        "stats": {key: stats_after[key] - stats_before[key] for key in stats_before},
        "cpu": {side: cpu_after[side] - cpu_before[side] for side in cpu_before},
    }


def cpu_seconds(database: str, groups: list[int]) -> dict[str, float]:
    """CPU seconds used so far by the backends of ``database``'s sessions (not the
    bench's own) and by the processes of the cluster's process groups."""
    import psutil
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
            "AND application_name <> %s",
            [database, SAMPLER],
        )
        backends = {pid for (pid,) in cursor.fetchall()}
    used = {"postgres": 0.0, "cluster": 0.0}
    for proc in psutil.process_iter(["pid", "cpu_times"]):
        times = proc.info["cpu_times"]
        with contextlib.suppress(ProcessLookupError):
            if times is None:
                continue
            if proc.info["pid"] in backends:
                used["postgres"] += times.user + times.system
            elif os.getpgid(proc.info["pid"]) in groups:
                used["cluster"] += times.user + times.system
    return used


def wait(done, seconds: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {seconds:g} s waiting for {what}; logs in {logs}")
        time.sleep(0.1)


@contextlib.contextmanager
def clusters(processes: int, args: argparse.Namespace, database: str, logs: Path) -> Iterator[list[int]]:
    """``processes`` clusters, each the leader of a new process group; yields the groups."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "BENCH_DB_NAME": database,
        "JOBS_WORKERS": str(args.workers_per_process),
        "BENCH_CLAIM_LOG_DIR": str(logs),
        "JOBS_HANDLER_MODULES": "bench.handlers,bench.claim_log",
        "PYTHONPATH": str(ROOT),
    }
    started: list[subprocess.Popen] = []
    try:
        for n in range(processes):
            with (logs / f"cluster-{n}.log").open("ab") as log:
                started.append(
                    subprocess.Popen(
                        [PYTHON, "manage.py", "qcluster"],
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield [proc.pid for proc in started]
    finally:
        # Gracefully first (the engine hands back what it holds), then the whole group.
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            kill_group(proc.pid)


@contextlib.contextmanager
def sampling_locks(database: str) -> Iterator[dict]:
    """Samples, every 20 ms on a connection of its own, how many sessions of ``database``
    wait on a heavyweight lock."""
    import psycopg
    from django.db import connection

    params = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k in ("host", "port", "user", "password", "dbname")
    }
    figures = {"samples": 0, "waiting": 0, "max": 0, "events": Counter()}
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(**params, autocommit=True, application_name=SAMPLER) as conn:
            while not stop.wait(0.02):
                events = [
                    event
                    for (event,) in conn.execute(
                        "SELECT wait_event FROM pg_stat_activity WHERE datname = %s "
                        "AND wait_event_type = 'Lock'",
                        [database],
                    )
                ]
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


def database_stats(database: str) -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this session's own, at least
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # no figures cached from before
        cursor.execute(
            "SELECT xact_commit, deadlocks, conflicts FROM pg_stat_database WHERE datname = %s", [database]
        )
        commits, deadlocks, conflicts = cursor.fetchone()
    return {"xact_commit": commits, "deadlocks": deadlocks, "conflicts": conflicts}


def table(rows: list[dict], args: argparse.Namespace, version: str) -> str:
    m = machine()
    header = [
        "processes",
        "workers",
        "jobs",
        "seconds",
        "drain jobs/s",
        "per process",
        "lock-wait samples",
        "max waiting",
        "waited on (session-samples)",
        "deadlocks/conflicts",
        "claims",
        "jobs/claim",
        "SKIP LOCKED misses",
        "commits/job",
        "PG CPU s (µs/job)",
        "cluster CPU s (µs/job)",
    ]
    cells = [
        [
            str(r["processes"]),
            str(r["workers"]),
            f"{r['jobs']:,}",
            f"{r['seconds']:.1f}",
            f"{r['drain']:,.0f}",
            f"{r['drain'] / r['processes']:,.0f}",
            f"{100 * r['lock_share']:.1f} %",
            str(r["lock_max"]),
            r["lock_events"] or "-",
            f"{r['deadlocks']}/{r['conflicts']}",
            f"{r['claims']:,}",
            f"{r['per_claim']:.1f}",
            f"{r['misses']:,} ({100 * r['misses'] / max(1, r['claims']):.1f} %)",
            f"{r['commits_per_job']:.2f}",
            f"{r['pg_cpu']:.1f} ({1e6 * r['pg_cpu'] / r['jobs']:.0f})",
            f"{r['cluster_cpu']:.1f} ({1e6 * r['cluster_cpu'] / r['jobs']:.0f})",
        ]
        for r in rows
    ]
    widths = [max(len(c) for c in col) for col in zip(header, *cells, strict=False)]
    lines = [
        f"Scale-out: {args.workers_per_process} engine workers per cluster process "
        f"(manage.py qcluster); {m['nproc']} cores ({m['cpu']}), PostgreSQL {version}",
        "",
    ]
    for row in [header, ["-" * w for w in widths], *cells]:
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=False)))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
