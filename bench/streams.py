"""Live streams under load: one web process (uvicorn) holding many SSE clients on one pipeline.

    .venv/bin/python bench/streams.py [--clients 500] [--redis] [--json]

On a scratch database (created and dropped here, on the server the project uses): a
``bench.progress`` job reporting progress for a few seconds, ``--clients`` SSE clients
(raw asyncio streams, HTTP/1.1 as browsers speak it: the body is chunked) connected to
``/sync/pipelines/<id>/events`` of one web process (``python -m project.web``) before a
``manage.py jobs_worker`` process runs the job. Figures:
delivery latency p50/p95/max from the JobEvent's ``at`` (the worker's clock; same
machine) to receipt by a client, events delivered of those expected, and the web
process's peak RSS and CPU% (from /proc) while it streams. ``--redis`` runs the web
process with ``REDIS_URL`` (events through the relay and a channels_redis group).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jobs  # noqa: E402
from bench import setup_django  # noqa: E402

PYTHON = sys.executable
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@jobs.handler("bench.progress", max_attempts=1)
def progress(ctx: jobs.JobContext) -> int:
    """A step every ``every`` s; the worker's heartbeat publishes it (about 4 per second)."""
    total = ctx.payload["steps"]
    for step in range(1, total + 1):
        time.sleep(ctx.payload["every"])
        ctx.progress(step, total, f"step {step}")
    return total


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    database = f"bench_streams_{os.getpid()}"
    # Every client is the one bench user: the per-user cap on open streams must let them all.
    os.environ.update(
        BENCH_DB_NAME=database,
        DJANGO_SETTINGS_MODULE="bench.settings",
        JOBS_HANDLER_MODULES="bench.handlers,bench.streams",
        STREAMS_MAX_PER_USER=str(args.clients),
    )
    if not args.redis:
        os.environ["REDIS_URL"] = ""
    setup_django()
    admin_sql(f'CREATE DATABASE "{database}"')
    procs: list[subprocess.Popen[bytes]] = []
    try:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        report = run(args, procs)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        from django.db import connections

        connections.close_all()
        admin_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=500, help="concurrent SSE clients")
    parser.add_argument("--steps", type=int, default=40, help="progress steps of the job")
    parser.add_argument("--every", type=float, default=0.1, help="seconds between steps")
    parser.add_argument("--redis", action="store_true", help="web process with REDIS_URL set")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args()


def admin_sql(statement: str) -> None:
    import psycopg
    from django.db import connection

    params = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k in ("host", "port", "user", "password") and v
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        conn.execute(statement)


def spawn(procs: list[subprocess.Popen[bytes]], *command: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [PYTHON, *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs.append(proc)
    return proc


def run(args: argparse.Namespace, procs: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_superuser("bench", password="bench-streams")
    token = Token.objects.create(user=user).key
    job = jobs.enqueue("bench.progress", {"steps": args.steps, "every": args.every})
    port = free_port()
    web = spawn(procs, "-m", "project.web", "--host", "127.0.0.1", "--port", str(port))
    wait_listening(port)
    path = f"/sync/pipelines/{job.pipeline_id}/events"
    figures = asyncio.run(measure(args, procs, web.pid, port, path, token))
    from django.db.models import Q

    expected = job.events.filter(~Q(kind="created")).count()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "mode": "redis relay" if args.redis else "PostgreSQL follower",
        "clients": args.clients,
        "events_per_client": expected,
        "events_expected": expected * args.clients,
        **figures,
    }


async def measure(
    args: argparse.Namespace, procs: list[subprocess.Popen[bytes]], pid: int, port: int, path: str, token: str
) -> dict[str, Any]:
    gate = asyncio.Semaphore(50)
    connected = [await_open(port, path, token, gate) for _ in range(args.clients)]
    streams = await asyncio.gather(*connected)
    sampler = Sampler(pid)
    sampling = asyncio.ensure_future(sampler.run())
    spawn(procs, "manage.py", "jobs_worker")
    results = await asyncio.gather(*(read_events(frames) for frames, _ in streams))
    sampling.cancel()
    for _, writer in streams:
        writer.close()
    latencies = sorted(ms for got in results for ms in got)
    return {
        "delivered": len(latencies),
        "clients_ended": sum(1 for got in results if got is not None),
        "latency_p50_ms": pct(latencies, 50),
        "latency_p95_ms": pct(latencies, 95),
        "latency_max_ms": latencies[-1] if latencies else None,
        "web_rss_mb": sampler.peak_rss / 2**20,
        "web_cpu_pct": sampler.cpu_pct(),
    }


class Frames:
    """The SSE frames of a chunked HTTP/1.1 response body, one at a time."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader, self.buffer = reader, b""

    async def next(self) -> bytes:
        while b"\n\n" not in self.buffer:
            size = int((await self.reader.readline()).strip(), 16)
            if size == 0:
                raise EOFError("the stream ended")
            self.buffer += (await self.reader.readexactly(size + 2))[:-2]
        frame, _, self.buffer = self.buffer.partition(b"\n\n")
        return frame


async def await_open(
    port: int, path: str, token: str, gate: asyncio.Semaphore
) -> tuple[Frames, asyncio.StreamWriter]:
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n\r\n".encode()
        )
        status = (await reader.readline()).split()[1]
        assert status == b"200", status
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        frames = Frames(reader)
        await frames.next()  # ": open": subscribed to the hub
        return frames, writer


async def read_events(frames: Frames) -> list[float]:
    """Latency (ms) of every job event until the end event."""
    latencies = []
    while True:
        block = (await asyncio.wait_for(frames.next(), 60)).decode()
        now = time.time()
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":")
        )
        if fields.get("event") == "end":
            return latencies
        if fields.get("event") == "job":
            at = datetime.fromisoformat(json.loads(fields["data"])["at"]).timestamp()
            latencies.append((now - at) * 1000)


class Sampler:
    """The web process's RSS and CPU time from /proc, every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_rss = pid, 0
        self.start = self.last = self.cpu()

    def cpu(self) -> tuple[float, float]:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return time.monotonic(), (int(fields[11]) + int(fields[12])) / TICKS

    async def run(self) -> None:
        while True:
            self.last = self.cpu()
            rss = int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * PAGE
            self.peak_rss = max(self.peak_rss, rss)
            await asyncio.sleep(0.2)

    def cpu_pct(self) -> float:
        (t0, c0), (t1, c1) = self.start, self.last
        return 100 * (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0


def pct(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100)[q - 1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        time.sleep(0.1)
    raise SystemExit("the web process did not start")


def table(report: dict[str, Any]) -> str:
    rows = [
        ("mode", report["mode"]),
        ("clients", report["clients"]),
        ("events delivered", f"{report['delivered']:,} of {report['events_expected']:,}"),
        ("latency p50 ms", fmt(report["latency_p50_ms"])),
        ("latency p95 ms", fmt(report["latency_p95_ms"])),
        ("latency max ms", fmt(report["latency_max_ms"])),
        ("web RSS MB (peak)", fmt(report["web_rss_mb"])),
        ("web CPU % (streaming)", fmt(report["web_cpu_pct"])),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(
        [
            f"Conveyor streams benchmark, {report['date']}",
            "",
            *(f"{name.ljust(width)}  {value}" for name, value in rows),
        ]
    )


def fmt(value: Any) -> str:
    return "—" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
