"""Conveyor's engine under faults: worker processes killed mid-job, PostgreSQL restarted
mid-drain.

    .venv/bin/python bench/faults.py [--kills 10] [--jobs 10000] [--workers 2] [--json]

Everything runs on a PostgreSQL of the bench's own (``pgserver``, in a temporary
directory that is deleted afterwards), since the bench restarts it; the workers are the
real cluster (``manage.py qcluster``) with the engine's default lease, heartbeat and
reaper intervals.

- kill → rescue: a job that blocks until released; once it runs, SIGKILL the worker
  process running it, and time the kill to the job's ``rescued`` history entry (the
  reaper's); p50 and max over ``--kills`` kills. Before each kill django-q2 has replaced
  the previous victim, and its engine has registered.
- restart mid-drain: ``--jobs`` no-op jobs enqueued at once; once a third have finished,
  ``pg_ctl restart`` in ``fast`` mode (sessions ended, clean shutdown) or ``immediate``
  mode (the server killed, crash recovery on start). From the jobs' finish times: the
  longest gap between two completions (the stall), when the first job finished after
  the restart began, how many jobs were rescued (the ones running when their session
  was cut), and when the last job finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.engine import cpu_model, kill_group  # noqa: E402
from devtools import embedded_db  # noqa: E402

T = TypeVar("T")
DATABASE = "bench_faults"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="workers killed mid-job")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per restart drain")
    parser.add_argument("--workers", type=int, default=2, help="cluster worker processes")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    work = Path(tempfile.mkdtemp(prefix="conveyor-faults-"))
    cluster: subprocess.Popen[bytes] | None = None
    try:
        server = embedded_db.ensure_running(work / "pg")
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        os.environ.update(
            DATABASE_URL=server.url(DATABASE),
            CONVEYOR_ALLOW_DEV_SECRET="1",
            DJANGO_SETTINGS_MODULE="bench.settings",
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        cluster = start_cluster(args.workers, work)
        report = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "workers": args.workers,
            "settings": engine_settings(),
            "kills": kill_to_rescue(args.kills, args.workers, work),
            "restarts": [
                restart_mid_drain(mode, args.jobs, args.workers, server) for mode in ("fast", "immediate")
            ],
        }
    finally:
        if cluster is not None:
            kill_group(cluster.pid)
        embedded_db.stop(work / "pg", "immediate")
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


def start_cluster(workers: int, work: Path) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBS_")}
    env.update(JOBS_WORKERS=str(workers), PYTHONPATH=str(ROOT))
    log = (work / "qcluster.log").open("ab")
    # Its own process group: every process of the cluster is swept with it.
    return subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` (reconnecting after a lost session) until it returns something
    truthy."""
    from django.db import OperationalError, connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except OperationalError:
            connection.close()
            value = None
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


def live_workers(killed: set[int]) -> int:
    from jobs.models import Worker

    return Worker.objects.exclude(pid__in=killed).count()


# --- kill → rescue ---------------------------------------------------------------------------


def kill_to_rescue(kills: int, workers: int, work: Path) -> dict[str, Any]:
    killed: set[int] = set()
    latencies: list[float] = []
    for n in range(kills):
        wait_until(lambda: live_workers(killed) >= workers, 120, "the cluster's workers")
        latencies.append(kill_once(work / f"release-{n}", killed))
        print(f"  kill {n + 1}: rescued after {latencies[-1]:.2f} s", file=sys.stderr, flush=True)
    return {
        "count": len(latencies),
        "p50": statistics.median(latencies),
        "max": max(latencies),
        "min": min(latencies),
    }


def kill_once(release: Path, killed: set[int]) -> float:
    """SIGKILL the process running a blocking job; seconds from the kill to its rescue."""
    from jobs import engine
    from jobs.models import Job, JobEvent

    job = engine.enqueue("bench.block", {"release": str(release)})
    locked_by = wait_until(
        lambda: (
            Job.objects.filter(pk=job.pk, state=Job.State.RUNNING).values_list("locked_by", flat=True).first()
        ),
        60,
        "the job to run",
    )
    pid = int(locked_by.split(":")[1])
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    killed.add(pid)
    rescued = wait_until(
        lambda: (
            JobEvent.objects.filter(job_id=job.pk, kind=JobEvent.Kind.RESCUED)
            .values_list("at", flat=True)
            .first()
        ),
        120,
        "the rescue",
    )
    release.touch()  # the next attempt returns at once
    wait_until(lambda: Job.objects.get(pk=job.pk).is_finished, 120, "the job to finish")
    return rescued.timestamp() - killed_at


# --- restart mid-drain -----------------------------------------------------------------------


def restart_mid_drain(mode: str, jobs: int, workers: int, server: Any) -> dict[str, Any]:
    from django.db import connection, transaction

    from jobs import engine
    from jobs.models import Job, JobEvent

    wait_until(lambda: live_workers(set()) >= workers, 120, "the cluster's workers")
    ids: list[int] = []
    for chunk in chunks(jobs, 1_000):
        with transaction.atomic():
            ids += engine.enqueue_many("bench.noop", [{}] * chunk)
    first_id = min(ids)

    def succeeded() -> int:
        return Job.objects.filter(pk__gte=first_id, state=Job.State.SUCCEEDED).count()

    wait_until(lambda: succeeded() >= jobs // 3, 300, "a third of the jobs to finish")
    restarted_at = time.time()
    embedded_db.restart(server.data_dir, mode)
    back_at = time.time()
    connection.close()
    wait_until(lambda: succeeded() >= jobs, 300, "every job to finish")

    rows = Job.objects.filter(pk__gte=first_id).values_list("finished_at", "rescues")
    finished = sorted(at.timestamp() for at, _ in rows)
    # The drain's own stream of completions, without the jobs that were in flight: they
    # come back later, through the reaper.
    stream = sorted(at.timestamp() for at, rescues in rows if not rescues)
    stall, resumed = max((b - a, b) for a, b in zip(stream, stream[1:], strict=False) if b >= restarted_at)
    rescued = [at.timestamp() for at, rescues in rows if rescues]
    result = {
        "mode": mode,
        "jobs": jobs,
        "server_down": back_at - restarted_at,
        "stall": stall,
        "resumed_after": resumed - restarted_at,
        "rescued": len(rescued),
        "rescued_done_after": max(rescued) - restarted_at if rescued else None,
        "last_done_after": finished[-1] - restarted_at,
        "ran_twice": JobEvent.objects.filter(job_id__gte=first_id, kind=JobEvent.Kind.SUCCEEDED)
        .values("job_id")
        .count()
        - jobs,
    }
    print(
        f"  {mode} restart: stall {result['stall']:.2f} s, {len(rescued)} rescued",
        file=sys.stderr,
        flush=True,
    )
    return result


def chunks(count: int, size: int) -> Iterator[int]:
    while count > 0:
        yield min(size, count)
        count -= size


# --- the report ------------------------------------------------------------------------------


def engine_settings() -> dict[str, float]:
    from jobs import conf

    return {
        "lease": conf.lease_seconds(),
        "heartbeat": conf.heartbeat_seconds(),
        "reaper": conf.reaper_seconds(),
        "poll": conf.poll_seconds(),
    }


def machine() -> dict[str, Any]:
    import platform

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "postgresql": version,
        "load": load,
    }


def table(report: dict[str, Any]) -> str:
    m, s, k = report["machine"], report["settings"], report["kills"]
    lines = [
        f"Conveyor under faults, {report['date']}",
        f"machine: {m['nproc']} cores ({m['cpu']}), Python {m['python']}, PostgreSQL "
        f"{m['postgresql']} (pgserver), load {m['load']:.1f} at the end; cluster of "
        f"{report['workers']} workers; lease {s['lease']:g} s, heartbeat {s['heartbeat']:g} s, "
        f"reaper every {s['reaper']:g} s",
        "",
        f"kill → rescue ({k['count']} SIGKILLs mid-job): p50 {k['p50']:.2f} s, "
        f"max {k['max']:.2f} s (min {k['min']:.2f} s)",
        "",
    ]
    header = [
        "restart",
        "jobs",
        "server down s",
        "no completion s",
        "resumed after s",
        "rescued",
        "rescued done after s",
        "all done after s",
        "succeeded twice",
    ]
    rows = [
        [
            r["mode"],
            f"{r['jobs']:,}",
            f"{r['server_down']:.2f}",
            f"{r['stall']:.2f}",
            f"{r['resumed_after']:.2f}",
            str(r["rescued"]),
            f"{r['rescued_done_after']:.2f}" if r["rescued_done_after"] is not None else "—",
            f"{r['last_done_after']:.2f}",
            str(r["ran_twice"]),
        ]
        for r in report["restarts"]
    ]
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=False)]
    for cells in [header, ["-" * w for w in widths], *rows]:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=False))
            )
        )
    return "\n".join(lines)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
