"""Exports: how fast a direct export writes Parquet, and what polling 500 submitted jobs
costs a worker.

    .venv/bin/python bench/exports.py [--rows 1000000,10000000] [--repeat 2]
                                      [--poll-jobs 500] [--json] [--skip-direct] [--skip-poll]

**Direct export.** A realistic mixed-type table (bigint, integer, two texts, numeric,
timestamptz, date, boolean, double, jsonb) of N rows is made in a scratch database on
the project's server (the embedded PostgreSQL, or ``DATABASE_URL``). For each size, the
same run reads the rows with ``COPY (…) TO STDOUT`` (text, read and dropped: the
baseline) and exports them with the worker's PostgreSQL engine into a Parquet file, in a
child process set up as a worker is (Django loaded), whose peak RSS is reported.

**Polling.** The fake Trino (a process of its own) holds 500 UNLOAD queries running;
500 export jobs are submitted for them through the engine's remote-worker calls
(``jobs.remote``: a claim, the UNLOAD, a snooze until the first poll), which are then
made due. One export worker (``exports.worker``, in this process), a remote worker of
the engine served by the web process (``python -m project.web``) over HTTP, runs passes
as its loop does (a claim of up to 50 due polls, each polled on its pool) until every
job has been polled once. Per pass: wall time, the worker's CPU time (its own threads
included) and polls per second of pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TABLE = "bench_export_rows"
COLUMNS = [
    ("id", "bigint"),
    ("account", "integer"),
    ("name", "varchar"),
    ("note", "varchar"),
    ("amount", "decimal(14,4)"),
    ("created_at", "timestamp(6) with time zone"),
    ("day", "date"),
    ("active", "boolean"),
    ("score", "double"),
    ("attributes", "json"),
]
SQL = f"SELECT {', '.join(name for name, _ in COLUMNS)} FROM {TABLE}"
# Polls one pass of the worker claims at most (its claim limit, and as many in flight).
POLL_LIMIT = 50


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,10000000", help="Table sizes, comma-separated.")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--poll-jobs", type=int, default=500)
    parser.add_argument("--skip-direct", action="store_true")
    parser.add_argument("--skip-poll", action="store_true")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    parser.add_argument("--child-export", nargs=2, metavar=("DSN", "FOLDER"), help=argparse.SUPPRESS)
    return parser.parse_args()


# -- direct export ------------------------------------------------------------------


def fill(dsn: str, rows: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(f"""
            CREATE TABLE {TABLE} AS
            SELECT n::bigint AS id, (n % 5000)::integer AS account,
                   'customer ' || md5(n::text) AS name,
                   CASE WHEN n % 7 = 0 THEN NULL
                        ELSE 'order, "' || (n % 977)::text || '" shipped to Zürich' END AS note,
                   round((n % 100000)::numeric / 7, 4)::numeric(14,4) AS amount,
                   timestamptz '2026-01-01 00:00:00+00' + (n || ' seconds')::interval AS created_at,
                   date '2020-01-01' + (n % 2500) AS day,
                   n % 3 = 0 AS active, (n % 1000) / 3.0::double precision AS score,
                   jsonb_build_object('tier', n % 4, 'region', 'eu-' || (n % 9)) AS attributes
              FROM generate_series(1, {rows}) AS n""")
        conn.execute(f"VACUUM ANALYZE {TABLE}")


def child_export(dsn: str, folder: str) -> None:
    """The export in a process of its own, with Django loaded as in a worker; prints its
    figures."""
    import django

    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    django.setup()
    from exports import parquet
    from exports.engines.postgres import PostgresEngine
    from exports.spec import JobSpec

    parquet.use_jemalloc()  # as export_worker does

    job = JobSpec(
        id=1,
        snapshot_id=1,
        tenant_id=1,
        generation=1,
        job_type="node",
        entity_name="rows",
        engine="postgres",
        sql=SQL,
        column_names=tuple(n for n, _ in COLUMNS),
        column_types=tuple(t for _, t in COLUMNS),
        starburst_role="bench",
        destination=folder,
    )
    started = time.perf_counter()
    written = PostgresEngine(dsn).export_direct(job, "part-g1.parquet")
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": written.rows, "seconds": seconds, "bytes": written.size, "peak_rss_mb": peak}))


def direct(dsn: str, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    from exports.engines.postgres import copy_read_rate

    rows = []
    for size in sizes:
        fill(dsn, size)
        for _ in range(repeat):
            copied, copy_seconds = copy_read_rate(dsn, SQL)
            with tempfile.TemporaryDirectory(prefix="bench-export-") as folder:
                child = subprocess.run(
                    [sys.executable, str(Path(__file__)), "--child-export", dsn, folder],
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    check=True,
                )
            export = json.loads(child.stdout.strip().splitlines()[-1])
            assert export["rows"] == copied == size, (export, copied, size)
            rows.append(
                {
                    "rows": size,
                    "copy_rows_s": copied / copy_seconds,
                    "export_rows_s": size / export["seconds"],
                    "ratio": (size / export["seconds"]) / (copied / copy_seconds),
                    "export_s": export["seconds"],
                    "file_mb": export["bytes"] / 2**20,
                    "peak_rss_mb": export["peak_rss_mb"],
                }
            )
    return rows


# -- polling ------------------------------------------------------------------------


def polling(database: str, jobs_count: int) -> list[dict[str, Any]]:
    import asyncio
    import dataclasses
    from datetime import timedelta

    import jobs
    from exports import services
    from exports.engines.trino import TrinoEngine, TrinoSettings
    from exports.models import ExportJob, JobStatus, Mapping, MappingEntity, TrinoBinding
    from exports.spec import JobSpec
    from exports.worker import ExportWorker, WorkerSettings
    from jobs import remote
    from jobs.models import Job
    from jobs.remote_client import RemoteClient
    from tenancy.models import Tenant

    token = "bench-export-worker-token-" + "x" * 16  # a credential's token: 32 characters at least
    credential = remote.Credential("exports", (services.QUEUE,), token)
    with (
        fake_trino() as trino_url,
        tempfile.TemporaryDirectory(prefix="bench-export-") as folder,
        web_process(database, token, trino_url, folder) as base_url,
    ):
        import django.conf

        django.conf.settings.EXPORTS_TRINO_URL = trino_url
        django.conf.settings.EXPORTS_STORAGE_URL = folder
        tenant = Tenant.objects.create(name="Bench", slug="bench")
        TrinoBinding.objects.create(tenant=tenant, role="bench", catalogs=["bench"])
        mapping = Mapping.objects.create(tenant=tenant, name="bench")
        MappingEntity.objects.bulk_create(
            MappingEntity(
                mapping=mapping,
                kind="node",
                name=f"e{n}",
                position=n,
                sql="SELECT 1 AS id",
                catalog="bench",
                columns=["id"],
            )
            for n in range(jobs_count)
        )
        snapshot = services.create_snapshot(mapping)
        engine = TrinoEngine(TrinoSettings(url=trino_url))
        httpx_post(f"{trino_url}/_control", {"action": "hold"})
        # Submitted as a worker submits them, through the engine's remote-worker calls:
        # each claim's UNLOAD sent to Trino, then the job asleep until its first poll.
        submitted_ids: list[int] = []
        while len(submitted_ids) < jobs_count:
            claim = remote.claim(
                credential, "bench-submitter", limit=remote.MAX_CLAIM, queues=[services.QUEUE]
            )
            if not claim.jobs:
                raise RuntimeError(f"only {len(submitted_ids)} of {jobs_count} export jobs were claimed")
            for job in claim.jobs:
                spec = JobSpec.from_json(claim.details[job.pk]["spec"])
                submitted = engine.submit_unload(dataclasses.replace(spec, destination=spec.claim_folder))
                remote.snooze(
                    credential,
                    "bench-submitter",
                    job.pk,
                    claim.token,
                    seconds=2,
                    details={"query_id": submitted.query_id, "next_uri": submitted.next_uri},
                )
                submitted_ids.append(job.pk)
            # Asleep until every job is submitted: none comes due for a poll meanwhile.
            Job.objects.filter(pk__in=[job.pk for job in claim.jobs]).update(
                run_after=jobs.now() + timedelta(hours=1)
            )
        Job.objects.filter(pk__in=submitted_ids).update(run_after=jobs.now())  # every first poll due

        passes: list[dict[str, Any]] = []

        async def run() -> None:
            client = RemoteClient(base_url, token, worker="bench-poller")
            worker = ExportWorker(
                client,
                WorkerSettings(
                    name="bench-poller", direct_export=False, claim_limit=POLL_LIMIT, max_in_flight=POLL_LIMIT
                ),
                engine_for=lambda name: engine,
            )
            stop = asyncio.Event()
            keeper = asyncio.create_task(client.keep_leases(stop))
            try:
                # A pass as the worker's loop makes it: one claim of what is due, each job
                # polled (a request to Trino, a snooze to the control plane) on its pool.
                # Until every job was polled once: early ones come due again (3 s on)
                # and may be polled twice before the last is reached.
                seen: set[int] = set()
                while len(seen) < jobs_count:
                    wall, cpu = time.perf_counter(), time.process_time()
                    await worker.run_pass()
                    polled = len(client.held)
                    seen.update(client.held)
                    await worker.wait_idle()
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    if not polled:
                        raise RuntimeError("a pass found no poll due")
                    passes.append({"polls": polled, "wall_s": wall, "cpu_s": cpu})
            finally:
                stop.set()
                await keeper
                worker._pool.shutdown(wait=True)
                await client.close()

        asyncio.run(run())
        rows = ExportJob.objects.filter(snapshot=snapshot)
        # Early ones may come due again (3 s on) before the last is polled: at least once.
        assert rows.filter(status=JobStatus.SUBMITTED, poll_count__gte=1).count() == jobs_count
    return passes


def httpx_post(url: str, body: dict[str, Any]) -> None:
    import httpx

    httpx.post(url, json=body).raise_for_status()


@contextmanager
def fake_trino() -> Iterator[str]:
    """The fake Trino as a process of its own (its work is not the worker's CPU); its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "devtools.fakes.trino", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        line = process.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the fake Trino said {line!r}")
        yield line.removeprefix("listening on ").rstrip("/")
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def web_process(database: str, token: str, trino_url: str, folder: str) -> Iterator[str]:
    """The web process on the scratch database, serving the control plane; its URL."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "BENCH_DB_NAME": database,
        "EXPORTS_WORKER_TOKEN": token,
        "EXPORTS_TRINO_URL": trino_url,
        "EXPORTS_STORAGE_URL": folder,
        "DEBUG": "true",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "project.web",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the web process did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(20)


# -- report -------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"PostgreSQL {result['server']}",
        "",
    ]
    if result.get("direct"):
        lines += [
            "| rows | COPY read rows/s | export rows/s | export / COPY | export s | "
            "file MB | worker peak RSS MB |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for item in result["direct"]:
            lines.append(
                f"| {item['rows']:,} | {item['copy_rows_s']:,.0f} | "
                f"{item['export_rows_s']:,.0f} | {item['ratio']:.0%} | "
                f"{item['export_s']:.2f} | {item['file_mb']:.1f} | "
                f"{item['peak_rss_mb']:.0f} |"
            )
        lines.append("")
        for size in sorted({item["rows"] for item in result["direct"]}):
            runs = [item for item in result["direct"] if item["rows"] == size]
            ratios = [item["ratio"] for item in runs]
            lines.append(
                f"{size:,} rows, {len(runs)} run(s): export / COPY median {statistics.median(ratios):.0%} "
                f"(lowest {min(ratios):.0%}), worker peak RSS at most "
                f"{max(item['peak_rss_mb'] for item in runs):.0f} MB"
            )
        lines.append("")
    if result.get("passes"):
        passes = result["passes"]
        lines += [
            f"{sum(p['polls'] for p in passes)} polls of submitted jobs, "
            f"{len(passes)} passes of up to {POLL_LIMIT}:",
            "",
            "| per pass | median | worst |",
            "|---|---:|---:|",
        ]
        for key, label in (("wall_s", "wall s"), ("cpu_s", "worker CPU s")):
            values = [p[key] for p in passes]
            lines.append(f"| {label} | {statistics.median(values):.3f} | {max(values):.3f} |")
        rates = [p["polls"] / p["wall_s"] for p in passes]
        lines.append(f"| polls per second of pass | {statistics.median(rates):,.0f} | {min(rates):,.0f} |")
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    if args.child_export:
        child_export(*args.child_export)
        return 0
    from bench import setup_django

    setup_django("bench.settings")
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    from bench.engine import create_database, drop_database, dsn, scratch_database

    result: dict[str, Any] = {}
    if not args.skip_direct:
        name = f"bench_exports_rows_{os.getpid()}"
        create_database(name)
        try:
            result["direct"] = direct(dsn(name), [int(n) for n in args.rows.split(",")], args.repeat)
        finally:
            drop_database(name)
    with scratch_database("bench_exports") as server:
        result["server"] = server
        if not args.skip_poll:
            from django.db import connection

            result["passes"] = polling(connection.settings_dict["NAME"], args.poll_jobs)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
