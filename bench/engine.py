"""Conveyor's engine against django-q2 alone and procrastinate, on the same PostgreSQL.

    .venv/bin/python bench/engine.py [--jobs N] [--json]

For each system, in one run: a fresh scratch database on the server the project uses
(the embedded PostgreSQL, or ``DATABASE_URL``), created and dropped by the bench; then

- enqueue single: jobs/s, one job per call, each call in its own transaction
  (Conveyor: ``transaction.atomic()`` around ``jobs.enqueue``; django-q2: ``async_task``;
  procrastinate: ``defer``), for the first ``--single`` jobs;
- enqueue batch: jobs/s for the rest, ``--batch`` jobs per call and transaction
  (``jobs.enqueue_many``; procrastinate ``batch_defer``; django-q2 has no batch);
- drain: the pre-enqueued no-op jobs through the system's real worker processes
  (``manage.py qcluster`` for Conveyor and django-q2, ``procrastinate worker``), jobs/s
  between the first and the last job to finish, by the finish times each system stores
  (worker start-up is left out; django-q2 stores no start time, only the enqueue's);
- pickup p50/p95: with the workers idle, one job at a time, from the enqueue call to the
  moment the handler starts (the handler sends a UDP datagram, see ``bench/probe.py``).

Each system is measured in a child process of its own (``--phase``), in its own process
group; every process of that group is killed when the phase ends, however it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import setup_django  # noqa: E402

PYTHON = sys.executable
SYSTEMS = ("conveyor", "django-q2-orm", "django-q2-redis", "procrastinate")
COLUMNS = [
    ("enqueue_single", "enqueue single/s"),
    ("enqueue_batch", "enqueue batch/s"),
    ("drain", "drain/s"),
    ("pickup_p50_ms", "pickup p50 ms"),
    ("pickup_p95_ms", "pickup p95 ms"),
]


# --- the parent: databases, phases, the table ------------------------------------------------


def main() -> int:
    args = parse_args()
    if args.phase:
        return run_phase(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    setup_django("bench.settings")
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "jobs": args.jobs,
        "command": " ".join(sys.argv),
        "rows": [],
    }
    logs = Path(tempfile.mkdtemp(prefix="conveyor-bench-"))
    for system, workers in plan(args):
        row = {"system": label(system, workers, args), "workers": workers}
        row.update(run_system(system, workers, args, logs))
        report["rows"].append(row)
        if not args.json:
            print(f"  {row['system']}: {short(row)}", file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs drained per system")
    parser.add_argument(
        "--single", type=int, default=2_000, help="of which enqueued one per call (the rest in batches)"
    )
    parser.add_argument("--batch", type=int, default=1_000, help="jobs per batch call")
    parser.add_argument("--samples", type=int, default=200, help="pickup latency samples")
    parser.add_argument(
        "--workers", default="2,4", help="Conveyor worker processes (JOBS_WORKERS), comma-separated"
    )
    parser.add_argument(
        "--peer-workers", type=int, default=2, help="worker processes for django-q2 and procrastinate"
    )
    parser.add_argument(
        "--orm-jobs",
        type=int,
        default=400,
        help="at most this many jobs for django-q2's ORM broker (it polls)",
    )
    parser.add_argument(
        "--redis-jobs",
        type=int,
        default=5_000,
        help="at most this many for django-q2 on Redis (no batch enqueue)",
    )
    parser.add_argument(
        "--procrastinate-concurrency",
        type=int,
        default=10,
        help="jobs each procrastinate worker runs at once (10 was its best of 1, 4 and 10 here)",
    )
    parser.add_argument("--drain-timeout", type=float, default=90.0)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--phase-workers", type=int, default=2, help=argparse.SUPPRESS)
    return parser.parse_args()


def plan(args: argparse.Namespace) -> list[tuple[str, int]]:
    steps = []
    for system in args.systems.split(","):
        if system not in SYSTEMS:
            raise SystemExit(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")
        if system == "conveyor":
            steps += [(system, int(w)) for w in args.workers.split(",")]
        else:
            steps.append((system, args.peer_workers))
    return steps


def label(system: str, workers: int, args: argparse.Namespace) -> str:
    if system == "procrastinate":
        return f"{system} ({workers} workers × {args.procrastinate_concurrency})"
    return f"{system} ({workers} workers)"


def run_system(system: str, workers: int, args: argparse.Namespace, logs: Path) -> dict:
    """One phase in a child process, on a scratch database dropped afterwards."""
    database = f"bench_{system.replace('-', '_')}_{os.getpid()}"
    env = {
        **os.environ,
        "BENCH_DB_NAME": database,
        "BENCH_LOG_DIR": str(logs),
        "BENCH_PROCRASTINATE_DSN": dsn(database),
        "PYTHONPATH": str(ROOT),
    }
    command = [
        PYTHON,
        str(Path(__file__).resolve()),
        "--phase",
        system,
        "--db",
        database,
        "--phase-workers",
        str(workers),
        "--jobs",
        str(args.jobs),
        "--single",
        str(args.single),
        "--batch",
        str(args.batch),
        "--samples",
        str(args.samples),
        "--orm-jobs",
        str(args.orm_jobs),
        "--redis-jobs",
        str(args.redis_jobs),
        "--procrastinate-concurrency",
        str(args.procrastinate_concurrency),
        "--drain-timeout",
        str(args.drain_timeout),
    ]
    create_database(database)
    child = None
    try:
        # Its own process group: the workers it starts join it, and are swept with it.
        child = subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        out, _ = child.communicate(timeout=args.drain_timeout + 240)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            return {"error": f"phase exited {child.returncode}; logs in {logs}"}
        return json.loads(lines[-1])
    except subprocess.TimeoutExpired:
        return {"error": f"phase timed out; logs in {logs}"}
    finally:
        if child is not None:
            kill_group(child.pid)
        drop_database(database)


def kill_group(pgid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
            time.sleep(0.5)


def admin_cursor() -> Any:
    from django.db import connection

    return connection.cursor()


def create_database(name: str) -> None:
    with admin_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cursor.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with admin_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A new database on the project's server, migrated, that this process's Django
    connection uses for the block (which gets the server's version, for the figures'
    heading); dropped afterwards, whatever happened."""
    from django.core.management import call_command
    from django.db import connection

    name = f"{prefix}_{os.getpid()}"
    create_database(name)
    home = connection.settings_dict["NAME"]
    try:
        connection.close()
        connection.settings_dict["NAME"] = name
        call_command("migrate", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            yield cursor.fetchone()[0]
    finally:
        connection.close()
        connection.settings_dict["NAME"] = home
        drop_database(name)


def dsn(database: str) -> str:
    """A libpq conninfo string for ``database`` on the project's server."""
    from django.db import connection
    from psycopg.conninfo import make_conninfo

    params = connection.get_connection_params()
    keep = {k: v for k, v in params.items() if k in ("host", "port", "user", "password")}
    return make_conninfo(**{k: str(v) for k, v in keep.items() if v}, dbname=database)


def machine() -> dict:
    with admin_cursor() as cursor:
        cursor.execute("SHOW server_version")
        server_version = cursor.fetchone()[0]
    from django.db import connection

    host = connection.get_connection_params().get("host", "")
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "postgresql": server_version,
        "database": "embedded (pgserver)" if str(host).startswith("/") else "DATABASE_URL",
    }


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def short(row: dict) -> str:
    if "error" in row:
        return row["error"]
    return ", ".join(f"{title} {fmt(row.get(key))}" for key, title in COLUMNS)


def fmt(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def table(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"Conveyor engine benchmark, {report['date']}",
        f"machine: {m['nproc']} cores ({m['cpu']}), Python {m['python']}, "
        f"PostgreSQL {m['postgresql']} ({m['database']}); N = {report['jobs']:,} jobs",
        "",
    ]
    header = ["system", *(title for _, title in COLUMNS), "drained"]
    rows = [
        [
            r["system"],
            *(fmt(r.get(key)) for key, _ in COLUMNS),
            f"{r.get('drained', 0):,}" if "error" not in r else r["error"],
        ]
        for r in report["rows"]
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    for cells in [header, ["-" * w for w in widths], *rows]:
        lines.append(
            "  ".join(
                str(c).ljust(w) if i == 0 else str(c).rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=False))
            )
        )
    return "\n".join(lines)


# --- a phase: one system, in its own process ---------------------------------------------


def run_phase(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    phase = {
        "conveyor": ConveyorPhase,
        "django-q2-orm": DjangoQPhase,
        "django-q2-redis": DjangoQPhase,
        "procrastinate": ProcrastinatePhase,
    }[args.phase]
    bench = phase(args)
    try:
        print(json.dumps(bench.run()), flush=True)
    finally:
        bench.stop_workers()
    return 0


class Phase:
    """Enqueue single, enqueue batch, drain with real workers, then probe pickup."""

    worker_env: dict[str, str] = {}

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workers: list[subprocess.Popen] = []
        self.probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.probe.bind(("127.0.0.1", 0))
        self.n = args.jobs

    # Each system fills these in.
    def prepare(self) -> None: ...
    def enqueue_single(self, count: int) -> None: ...
    def enqueue_batch(self, count: int, size: int) -> bool:
        return False

    def start_workers(self) -> None: ...
    def finished(self) -> int: ...
    def drain_window(self) -> tuple[float, float]: ...
    def enqueue_probe(self, probe_id: str) -> None: ...
    def purge(self) -> None: ...

    def sql(self, statement: str) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(statement)

    def run(self) -> dict:
        self.prepare()
        result: dict[str, Any] = {}
        single = min(self.args.single, self.n)
        if self.n - single == 0 or not self.supports_batch():
            single = self.n
        result["enqueue_single"] = rate(single, timed(lambda: self.enqueue_single(single)))
        if self.n > single:
            seconds = timed(lambda: self.enqueue_batch(self.n - single, self.args.batch))
            result["enqueue_batch"] = rate(self.n - single, seconds)
        self.start_workers()
        result.update(self.drain())
        self.purge()
        # The drain left dead rows behind; let every system's tables be as after routine
        # autovacuum, rather than have autovacuum run during the latency samples.
        self.sql("VACUUM ANALYZE")
        result.update(self.pickup())
        return result

    def supports_batch(self) -> bool:
        return True

    def drain(self) -> dict:
        deadline = time.monotonic() + self.args.drain_timeout
        done = 0
        while time.monotonic() < deadline:
            done = self.finished()
            if done >= self.n:
                break
            time.sleep(0.25)
        first, last = self.drain_window()
        return {"drained": done, "drain": rate(done - 1, last - first), "drain_seconds": last - first}

    def pickup(self) -> dict:
        """Idle workers; one job at a time, spaced a little, enqueue call → handler start."""
        time.sleep(1.0)
        samples: list[float] = []
        calls: list[float] = []
        budget = time.monotonic() + 15  # django-q2's ORM broker polls: ~0.2 s a sample
        self.probe.settimeout(5.0)
        for i in range(self.args.samples):
            if time.monotonic() > budget:
                break
            probe_id = f"p{i}"
            started = time.time()
            self.enqueue_probe(probe_id)
            returned = time.time()
            at = self.wait_probe(probe_id)
            if at is not None:
                samples.append((at - started) * 1000)
                calls.append((returned - started) * 1000)
            time.sleep(random.uniform(0.01, 0.04))
        if len(samples) < 2:
            return {"pickup_samples": len(samples)}
        cuts = statistics.quantiles(samples, n=100, method="inclusive")
        # Of which the enqueue call itself (its INSERT and commit, for all but Redis).
        return {
            "pickup_p50_ms": cuts[49],
            "pickup_p95_ms": cuts[94],
            "pickup_samples": len(samples),
            "pickup_enqueue_call_p50_ms": statistics.median(calls),
        }

    def wait_probe(self, probe_id: str) -> float | None:
        while True:
            try:
                data = self.probe.recv(200).decode().split()
            except TimeoutError:
                return None
            if data[0] == probe_id:
                return float(data[1])

    def spawn(self, command: list[str], **env: str) -> None:
        port = str(self.probe.getsockname()[1])
        log = open(
            Path(os.environ.get("BENCH_LOG_DIR", tempfile.gettempdir()))
            / f"{self.args.phase}-{len(self.workers)}.log",
            "ab",
        )
        self.workers.append(
            subprocess.Popen(
                command,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.worker_env, **env, "BENCH_PROBE_PORT": port},
            )
        )

    def stop_workers(self) -> None:
        """SIGTERM each worker (graceful), then SIGKILL whatever is left of its tree."""
        import psutil

        for proc in self.workers:
            try:
                tree = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                tree = []
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            proc.kill()
            for child in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
        self.workers = []


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def rate(count: int, seconds: float) -> float | None:
    return count / seconds if seconds > 0 and count else None


def chunks(count: int, size: int) -> Iterator[int]:
    while count > 0:
        yield min(size, count)
        count -= size


class ConveyorPhase(Phase):
    """Conveyor's engine through its real cluster: ``manage.py qcluster``, engine threads."""

    def prepare(self) -> None:
        setup_django("bench.settings")
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def enqueue_single(self, count: int) -> None:
        from django.db import transaction

        from jobs import engine

        for i in range(count):
            with transaction.atomic():
                engine.enqueue("bench.noop", {"n": i})

    def enqueue_batch(self, count: int, size: int) -> bool:
        from django.db import transaction

        from jobs import engine

        for n in chunks(count, size):
            with transaction.atomic():
                engine.enqueue_many("bench.noop", [{}] * n)
        return True

    def start_workers(self) -> None:
        self.spawn(
            [PYTHON, "manage.py", "qcluster"],
            DJANGO_SETTINGS_MODULE="bench.settings",
            JOBS_WORKERS=str(self.args.phase_workers),
        )

    def finished(self) -> int:
        from jobs.models import Job

        return Job.objects.filter(state=Job.State.SUCCEEDED).count()

    def drain_window(self) -> tuple[float, float]:
        from django.db.models import Max, Min

        from jobs.models import Job

        span = Job.objects.filter(state=Job.State.SUCCEEDED).aggregate(
            first=Min("finished_at"), last=Max("finished_at")
        )
        return span["first"].timestamp(), span["last"].timestamp()

    def enqueue_probe(self, probe_id: str) -> None:
        from jobs import engine

        engine.enqueue("bench.noop", {"probe": probe_id})  # autocommit: commits at once

    def purge(self) -> None:
        """Drop what a drain timeout left pending (the workers still run: lock them out)."""
        from django.db import connection, transaction

        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("LOCK TABLE jobs_job IN SHARE ROW EXCLUSIVE MODE")
            cursor.execute(
                "DELETE FROM jobs_jobevent WHERE job_id IN (SELECT id FROM jobs_job WHERE state = 'pending')"
            )
            cursor.execute("DELETE FROM jobs_job WHERE state = 'pending'")


class DjangoQPhase(Phase):
    """django-q2 alone: one django-q2 task per job, ORM or Redis broker."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.broker = args.phase.rsplit("-", 1)[1]
        self.n = min(args.jobs, args.orm_jobs if self.broker == "orm" else args.redis_jobs)
        os.environ["BENCH_DQ_BROKER"] = self.broker
        os.environ["BENCH_DQ_NAME"] = f"bench-{self.broker}-{os.getpid()}"
        self.worker_env = {"BENCH_DQ_BROKER": self.broker, "BENCH_DQ_NAME": os.environ["BENCH_DQ_NAME"]}

    def supports_batch(self) -> bool:
        return False

    def prepare(self) -> None:
        setup_django("bench.settings_djangoq")
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        self.purge()

    def enqueue_single(self, count: int) -> None:
        from django_q.tasks import async_task

        for _ in range(count):
            async_task("bench.handlers.dq_noop", None)

    def start_workers(self) -> None:
        self.spawn(
            [PYTHON, "manage.py", "qcluster"],
            DJANGO_SETTINGS_MODULE="bench.settings_djangoq",
            JOBS_WORKERS=str(self.args.phase_workers),
        )

    def finished(self) -> int:
        from django_q.models import Success

        return Success.objects.count()

    def drain_window(self) -> tuple[float, float]:
        from django.db.models import Max, Min
        from django_q.models import Success

        span = Success.objects.aggregate(first=Min("stopped"), last=Max("stopped"))
        return span["first"].timestamp(), span["last"].timestamp()

    def enqueue_probe(self, probe_id: str) -> None:
        from django_q.tasks import async_task

        async_task("bench.handlers.dq_noop", probe_id)

    def purge(self) -> None:
        from django_q.brokers import get_broker

        get_broker().purge_queue()


class ProcrastinatePhase(Phase):
    """procrastinate 3 on its own schema; ``procrastinate worker`` processes."""

    def prepare(self) -> None:
        from bench.procrastinate_app import app

        app.open()
        app.schema_manager.apply_schema()
        import psycopg

        self.db = psycopg.connect(os.environ["BENCH_PROCRASTINATE_DSN"], autocommit=True)

    def enqueue_single(self, count: int) -> None:
        from bench.procrastinate_app import noop

        for _ in range(count):
            noop.defer()

    def enqueue_batch(self, count: int, size: int) -> bool:
        from bench.procrastinate_app import noop

        for n in chunks(count, size):
            noop.batch_defer(*[{}] * n)
        return True

    def start_workers(self) -> None:
        for _ in range(self.args.phase_workers):
            # Logging at WARNING, as the other systems run here: INFO writes two lines a job.
            self.spawn(
                [
                    PYTHON,
                    "-m",
                    "procrastinate",
                    "--app=bench.procrastinate_app.app",
                    "--log-level=warning",
                    "worker",
                    f"--concurrency={self.args.procrastinate_concurrency}",
                ]
            )

    def finished(self) -> int:
        return self.db.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()[0]

    def drain_window(self) -> tuple[float, float]:
        first, last = self.db.execute(
            "SELECT min(at), max(at) FROM procrastinate_events WHERE type = 'succeeded'"
        ).fetchone()
        return first.timestamp(), last.timestamp()

    def enqueue_probe(self, probe_id: str) -> None:
        from bench.procrastinate_app import noop

        noop.defer(probe_id=probe_id)

    def purge(self) -> None:
        self.db.execute("DELETE FROM procrastinate_jobs WHERE status = 'todo'")

    def sql(self, statement: str) -> None:
        self.db.execute(statement)


if __name__ == "__main__":
    sys.exit(main())
