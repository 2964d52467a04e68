"""The CO2 calculator's bulk path against PostgreSQL's own COPY, and its interactive path.

    .venv/bin/python bench/factors.py [--rows 1000000] [--json]

In one run, on a scratch database created (and dropped) on the project's server (the
embedded PostgreSQL, or ``DATABASE_URL``), with one generated entries CSV:

- COPY: ``COPY … FROM STDIN (FORMAT csv)`` of the file into a bare table (a ceiling no
  design that writes the real tables can approach);
- bulk_create: the same rows parsed in Python and saved with Django's ``bulk_create``;
- COPY into the entries table: the same rows, typed as the ingest writes them (formatted
  beforehand, untimed, by ``factors.entry_ingest.CopyRows``), in one ``COPY`` into
  ``factors_dataentry`` itself (its indexes, check constraints and the reference trigger
  of migrations 0002–0003) in one transaction, commit included, for a scratch module and
  job: the fastest load a design that writes the real entries table could pick, and the
  baseline the end to end is reported against (aim: at least half of its rate). It runs
  before the end to end, before the worker starts: its rows, which no load row makes
  visible, are then deleted with its job and the table vacuumed, so that the end to end
  neither finds them nor has autovacuum cleaning up after them;
- end to end: ``POST /sync/dispatch`` of the file (validation and staging included) until
  its pipeline (csv_ingest → emission_recalc → aggregation, run by a real
  ``manage.py jobs_worker`` process) has written entries, emissions and stats, which are
  then checked against totals computed here from the file; the worker's peak RSS;
- interactive: p50/p95 server time of POST/PATCH/DELETE on a module of 10,000 entries
  (Django's test client in this process: no network in the figure).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import scratch_project, setup_django  # noqa: E402

FACTORS = {
    ("short", "economy"): "0.151",
    ("short", "business"): "0.226",
    ("medium", "economy"): "0.098",
    ("medium", "business"): "0.285",
    ("long", "economy"): "0.102",
    ("long", "business"): "0.296",
}  # no factor for "first"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--bulk-create-rows",
        type=int,
        default=200_000,
        help="Rows of the file for the bulk_create baseline (its rate is "
        "linear in the rows; default 200,000).",
    )
    parser.add_argument("--interactive-entries", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=400, help="Interactive requests.")
    parser.add_argument(
        "--interactive-only",
        action="store_true",
        help="Skip COPY, bulk_create and end to end: load a background of other entries "
        "(--background-rows) with their emissions straight into the tables, then "
        "measure the interactive path only.",
    )
    parser.add_argument(
        "--background-rows",
        type=int,
        default=1_000_000,
        help="With --interactive-only: entries (and their emissions) of another module "
        "loaded first, so that the tables are as big as after the bulk run "
        "(default 1,000,000).",
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    run, show = (_run_interactive_only, interactive_table) if args.interactive_only else (_run, table)
    with scratch_project("bench_factors") as work:
        figures = run(args, work)
    print(json.dumps(figures, indent=2) if args.json else show(figures))
    return 0


# --- the run -------------------------------------------------------------------------------------


def _run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    path = work / "entries.csv"
    totals = generate(path, args.rows)
    figures: dict[str, Any] = {
        "rows": args.rows,
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "machine": machine(),
    }
    figures["copy"] = copy_baseline(path, args.rows)
    figures["bulk_create"] = bulk_create_baseline(path, min(args.bulk_create_rows, args.rows))
    figures["real_copy"] = real_table_copy_baseline(path, args.rows, work)
    worker = start_worker(work)
    try:
        figures["end_to_end"] = end_to_end(path, args.rows, totals, worker)
        figures["interactive"] = interactive(work, args.interactive_entries, args.samples)
    finally:
        stop(worker)
    copy_rate = figures["copy"]["rows_per_s"]
    real_rate = figures["real_copy"]["rows_per_s"]
    figures["real_copy"]["vs_copy"] = round(real_rate / copy_rate, 3)
    pipeline = figures["end_to_end"]["pipeline"]
    for part in (figures["bulk_create"], figures["end_to_end"], pipeline):
        part["vs_copy"] = round(part["rows_per_s"] / copy_rate, 3)
        part["vs_real_copy"] = round(part["rows_per_s"] / real_rate, 3)
    return figures


def generate(path: Path, rows: int) -> dict[str, Any]:
    """Plane entries (about 2 % without factor) and their totals, computed here."""
    rng = random.Random(1)
    hauls, cabins = ("short", "medium", "long"), ("economy", "business", "first")
    count, quantity, kg, missing = 0, Decimal(0), Decimal(0), 0
    six = Decimal("0.000001")
    with path.open("w", newline="") as out:
        out.write("quantity,unit,haul,cabin\n")
        for _ in range(rows):
            q = f"{rng.randint(50, 12000)}.{rng.randint(0, 99):02d}"
            haul = rng.choice(hauls)
            cabin = rng.choices(cabins, (80, 18, 2))[0]
            out.write(f"{q},km,{haul},{cabin}\n")
            count += 1
            quantity += Decimal(q)
            value = FACTORS.get((haul, cabin))
            if value is None:
                missing += 1
            else:
                kg += (Decimal(q) * Decimal(value)).quantize(six)
    return {"entries": count, "quantity": quantity, "kg_co2e": kg, "without_factor": missing}


def _report(code: str) -> Any:
    from factors.models import CarbonReport, ReportModule, Unit
    from factors.unit_directory import open_reports

    unit = Unit.objects.create(code=code, name=f"Bench {code}")
    open_reports([unit.pk], 2024)
    return ReportModule.objects.get(report=CarbonReport.objects.get(unit=unit), module_type="travel")


def copy_baseline(path: Path, rows: int) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_bare (quantity text, unit text, haul text, cabin text)")
        started = time.perf_counter()
        with (
            cursor.copy("COPY bench_bare FROM STDIN (FORMAT csv, HEADER)") as copy,
            path.open("rb") as handle,
        ):
            while chunk := handle.read(1 << 20):
                copy.write(chunk)
        seconds = time.perf_counter() - started
        cursor.execute("DROP TABLE bench_bare")
    return {"seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


def bulk_create_baseline(path: Path, rows: int) -> dict[str, Any]:
    """The rows as Django models, saved with bulk_create in batches of 5,000."""
    from itertools import islice

    from django.db import connection, transaction

    from factors.models import DataEntry
    from jobs import clock

    module = _report("BENCH-BULK")
    started = time.perf_counter()
    with path.open(newline="") as handle, transaction.atomic():
        reader = csv.reader(handle)
        next(reader)
        now = clock.now()
        for batch in iter(lambda: list(islice(reader, 5000)), []):
            DataEntry.objects.bulk_create(
                [
                    DataEntry(
                        module=module,
                        data_entry_type="plane",
                        year=2024,
                        quantity=Decimal(q),
                        unit=unit,
                        classification={"haul": h, "cabin": c},
                        source="manual",
                        created_at=now,
                        updated_at=now,
                    )
                    for q, unit, h, c in batch[: max(rows, 0)]
                ]
            )
            rows -= len(batch)
            if rows <= 0:
                break
    seconds = time.perf_counter() - started
    done = DataEntry.objects.filter(module=module).count()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM factors_dataentry WHERE module_id = %s", [module.pk])
    return {"rows": done, "seconds": round(seconds, 2), "rows_per_s": round(done / seconds)}


def real_table_copy_baseline(path: Path, rows: int, work: Path) -> dict[str, Any]:
    """The file's rows in one COPY into ``factors_dataentry``, in one transaction.

    The rows are the ingest's own (``CopyRows``: module, type, year, the classification as
    JSON, source ``csv``, a job and the row number, as ``factors_entry_provenance`` requires),
    written to a file first so that the timed part is the database's alone: the COPY,
    its constraints and trigger, and the commit. Then the rows go (with the job), and the
    table is vacuumed before the end to end starts."""
    from itertools import islice

    from django.db import connection, transaction

    from factors.entry_ingest import COPY_COLUMNS, CopyRows, Target
    from jobs import clock
    from jobs.models import Job

    module = _report("BENCH-COPY")
    now = clock.now()
    # Finished, so that no worker would ever claim it; it only names the rows.
    job = Job.objects.create(
        type="factors.csv_ingest", state=Job.State.SUCCEEDED, created_at=now, run_after=now, finished_at=now
    )
    typed = work / "entries.copy"
    started = time.perf_counter()
    with path.open("rb") as handle, typed.open("wb") as out:
        columns = tuple(handle.readline().decode().strip().split(","))
        copy_rows = CopyRows(job.pk, Target(module.pk, "plane", module.report.year, "csv"), columns)
        first = 2  # row 1 is the header
        while lines := list(islice(handle, 50_000)):
            out.write(copy_rows.format(lines, first))
            first += len(lines)
    formatted = time.perf_counter() - started
    statement = f"COPY factors_dataentry ({', '.join(COPY_COLUMNS)}) FROM STDIN"
    started = time.perf_counter()
    with (
        transaction.atomic(),
        connection.cursor() as cursor,
        cursor.copy(statement) as copy,
        typed.open("rb") as handle,
    ):
        while chunk := handle.read(1 << 20):
            copy.write(chunk)
    seconds = time.perf_counter() - started
    typed.unlink()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM factors_dataentry WHERE module_id = %s", [module.pk])
        done = cursor.fetchone()[0]
        cursor.execute("DELETE FROM factors_dataentry WHERE module_id = %s", [module.pk])
        job.delete()
        cursor.execute("VACUUM factors_dataentry")
    if done != rows:
        raise RuntimeError(f"COPY into the entries table wrote {done} rows of {rows}")
    return {
        "rows": done,
        "seconds": round(seconds, 2),
        "rows_per_s": round(done / seconds),
        "format_seconds": round(formatted, 2),
    }


# --- the worker ---------------------------------------------------------------------------------------


def start_worker(work: Path) -> subprocess.Popen[bytes]:
    from jobs.models import Worker

    log = (work / "worker.log").open("wb")
    # Two workers, as the cluster runs by default (JOBS_WORKERS): the recalculation of
    # the rows already loaded runs beside the ingest.
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "jobs_worker", "--concurrency", "2"],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not Worker.objects.exists():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start; see {work / 'worker.log'}")
        time.sleep(0.1)
    return worker


def peak_rss_mb(pid: int) -> float:
    """The process's high-water mark of resident memory (Linux: VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def stop(worker: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)


# --- end to end ---------------------------------------------------------------------------------------


def _operator() -> Any:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.filter(username="bench").first()
    client = Client()
    client.force_login(user or get_user_model().objects.create_superuser("bench", "", "x"))
    return client


def _factors() -> None:
    from factors.models import EmissionFactor
    from jobs import clock

    now = clock.now()
    EmissionFactor.objects.bulk_create(
        EmissionFactor(
            data_entry_type="plane",
            year=2024,
            classification={"haul": h, "cabin": c},
            value=Decimal(v),
            unit="km",
            created_at=now,
            updated_at=now,
        )
        for (h, c), v in FACTORS.items()
    )


def _wait_for(pipeline: Any, timeout: float = 3600) -> None:
    from jobs.models import Job

    deadline = time.monotonic() + timeout
    while True:
        states = set(Job.objects.filter(pipeline_id=pipeline).values_list("type", "state"))
        if ("factors.aggregation", "succeeded") in states and not any(
            state in Job.UNFINISHED for _, state in states
        ):
            return
        failed = [t for t, state in states if state == "failed"]
        if failed or time.monotonic() > deadline:
            raise RuntimeError(f"pipeline {pipeline} did not finish: {states}")
        time.sleep(0.02)


def end_to_end(
    path: Path, rows: int, totals: dict[str, Any], worker: subprocess.Popen[bytes]
) -> dict[str, Any]:
    from jobs.models import Job

    _factors()
    module = _report("BENCH-E2E")
    client = _operator()
    started = time.perf_counter()
    with path.open("rb") as handle:
        response = client.post(
            "/sync/dispatch",
            {"report": module.report_id, "module": "travel", "data_entry_type": "plane", "file": handle},
        )
    accepted = time.perf_counter()
    if response.status_code != 202:
        raise RuntimeError(f"upload refused: {response.status_code} {response.content[:500]!r}")
    pipeline = response.json()["pipeline"]
    _wait_for(pipeline)
    done = time.perf_counter()
    rss = peak_rss_mb(worker.pid)
    jobs: dict[str, dict[str, float]] = {}
    for job in Job.objects.filter(pipeline_id=pipeline).order_by("id"):
        kind = jobs.setdefault(job.type.split(".")[1], {"jobs": 0, "seconds": 0.0})
        kind["jobs"] += 1
        kind["seconds"] = round(kind["seconds"] + job.duration_seconds, 2)
    return {
        "seconds": round(done - started, 2),
        "rows_per_s": round(rows / (done - started)),
        "upload_seconds": round(accepted - started, 2),
        "pipeline": {"seconds": round(done - accepted, 2), "rows_per_s": round(rows / (done - accepted))},
        "jobs": jobs,
        "worker_peak_rss_mb": rss,
        "checked": check(module, totals, rows),
    }


def _busy(name: str, kind: dict[str, float]) -> str:
    jobs = f" ({kind['jobs']:.0f} jobs)" if kind["jobs"] > 1 else ""
    return f"{name} {kind['seconds']:.2f} s{jobs}"


def check(module: Any, totals: dict[str, Any], rows: int) -> str:
    """Entries, emissions and stats against the totals computed from the file."""
    from factors import aggregation, stats
    from factors.models import DataEntry, Emission

    module.refresh_from_db()
    entries = DataEntry.objects.filter(module=module).count()
    emissions = Emission.objects.filter(data_entry__module=module).count()
    expected = {
        "entries": totals["entries"],
        "kg_co2e": stats.amount(totals["kg_co2e"]),
        "without_factor": totals["without_factor"],
    }
    found = {key: module.stats[key] for key in expected}
    problems = []
    if entries != rows:
        problems.append(f"{entries} entries for {rows} rows")
    if emissions != rows - totals["without_factor"]:
        problems.append(f"{emissions} emissions")
    if found != expected:
        problems.append(f"stats {found} != {expected}")
    if module.stats != stats.module_stats(aggregation.module_totals(module.pk)):
        problems.append("stats differ from a recompute")
    if problems:
        raise RuntimeError("; ".join(problems))
    return "entries, emissions and stats match the file's totals"


# --- interactive ------------------------------------------------------------------------------------


def interactive(work: Path, entries: int, samples: int) -> dict[str, Any]:
    """p50/p95 of POST, PATCH and DELETE on a module holding ``entries`` entries."""
    from factors import aggregation, stats

    module = _report("BENCH-UI")
    path = work / "interactive.csv"
    generate(path, entries)
    client = _operator()
    with path.open("rb") as handle:
        response = client.post(
            "/sync/dispatch",
            {"report": module.report_id, "module": "travel", "data_entry_type": "plane", "file": handle},
        )
    _wait_for(response.json()["pipeline"])
    url = f"/v1/carbon_reports/{module.report_id}/modules/travel/data-entries"
    rng = random.Random(3)
    timings: dict[str, list[float]] = {"POST": [], "PATCH": [], "DELETE": []}
    created: list[int] = []
    warm = {
        "data_entry_type": "plane",
        "quantity": "1",
        "classification": {"haul": "short", "cabin": "economy"},
    }
    for _ in range(20):  # the first requests fill Django's and DRF's caches
        added = client.post(url, warm, content_type="application/json").json()["entry"]["id"]
        client.delete(f"{url}/{added}")
    for n in range(samples):
        body = {
            "data_entry_type": "plane",
            "quantity": f"{rng.randint(1, 9000)}.5",
            "classification": {
                "haul": rng.choice(["short", "medium", "long"]),
                "cabin": rng.choice(["economy", "business"]),
            },
        }
        method = "POST" if n % 4 < 2 or not created else ("PATCH" if n % 4 == 2 else "DELETE")
        started = time.perf_counter()
        if method == "POST":
            answer = client.post(url, body, content_type="application/json")
            created.append(answer.json()["entry"]["id"])
        elif method == "PATCH":
            answer = client.patch(f"{url}/{rng.choice(created)}", body, content_type="application/json")
        else:
            answer = client.delete(f"{url}/{created.pop(rng.randrange(len(created)))}")
        timings[method].append((time.perf_counter() - started) * 1000)
        if answer.status_code not in (200, 201):
            raise RuntimeError(f"{method} answered {answer.status_code}: {answer.content[:300]!r}")
    module.refresh_from_db()
    if module.stats != stats.module_stats(aggregation.module_totals(module.pk)):
        raise RuntimeError("interactive stats differ from a recompute")
    every = [t for values in timings.values() for t in values]
    return {
        "entries_in_module": module.stats["entries"],
        "requests": len(every),
        "p50_ms": round(_percentile(every, 50), 1),
        "p95_ms": round(_percentile(every, 95), 1),
        "by_method": {
            m: {"p50_ms": round(_percentile(v, 50), 1), "p95_ms": round(_percentile(v, 95), 1)}
            for m, v in timings.items()
            if v
        },
    }


def _percentile(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


# --- interactive only ------------------------------------------------------------------------------


def _run_interactive_only(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """A background of ``--background-rows`` entries, then the interactive measurement."""
    setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures: dict[str, Any] = {"machine": machine(), "background": background(args.background_rows)}
    worker = start_worker(work)
    try:
        figures["interactive"] = interactive(work, args.interactive_entries, args.samples)
    finally:
        stop(worker)
    return figures


BACKGROUND_COLUMNS = (
    "module_id",
    "data_entry_type",
    "year",
    "quantity",
    "unit",
    "classification",
    "source",
    "job_id",
    "row_number",
    "created_at",
    "updated_at",
)


def background(rows: int) -> dict[str, Any]:
    """``rows`` plane entries of another module and their emissions, written with COPY and
    SQL rather than through the pipeline, in this process's connection (as the full run's
    bulk parts are): an earlier upload of a fifth of the rows is loaded and replaced
    (deleted) before any emission exists, as the bulk_create baseline's rows are in the
    full run; then the rows are loaded, priced like the recalculation does, and the
    module's stats recomputed. Nothing is vacuumed or analyzed here: that is left to
    autovacuum, as after a real bulk load."""
    from django.db import connection, transaction

    from factors import aggregation, stats
    from factors.models import ReportModule

    _factors()
    module = _report("BENCH-BACKGROUND")
    started = time.perf_counter()
    replaced = rows // 5
    with transaction.atomic():
        _copy_entries(module.pk, replaced, seed=4)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM factors_dataentry WHERE module_id = %s", [module.pk])
    with transaction.atomic():
        _copy_entries(module.pk, rows, seed=5)
    loaded = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO factors_emission (data_entry_id, factor_id, kg_co2e, job_id, computed_at) "
            "SELECT d.id, f.id, round(d.quantity * f.value, 6), 0, now() "
            "FROM factors_dataentry d JOIN factors_emissionfactor f "
            "ON f.data_entry_type = d.data_entry_type AND f.year = d.year "
            "AND f.classification = d.classification WHERE d.module_id = %s",
            [module.pk],
        )
        emissions = cursor.rowcount
    priced = time.perf_counter()
    with transaction.atomic():
        module.stats = stats.module_stats(aggregation.module_totals(module.pk))
        module.save(update_fields=["stats"])
        report = module.report
        report.stats = stats.report_stats(
            ReportModule.objects.filter(report=report).values_list("module_type", "stats")
        )
        report.save(update_fields=["stats"])
    done = time.perf_counter()
    return {
        "rows": rows,
        "emissions": emissions,
        "replaced_rows": replaced,
        "seconds": round(done - started, 2),
        "entries_seconds": round(loaded - started, 2),
        "emissions_seconds": round(priced - loaded, 2),
    }


def _copy_entries(module_id: int, rows: int, seed: int) -> None:
    """``rows`` bulk plane entries of a module (written by a job long since pruned), with
    the distribution of ``generate``."""
    from django.db import connection

    rng = random.Random(seed)
    hauls, cabins = ("short", "medium", "long"), ("economy", "business", "first")
    now = "2024-06-30 12:00:00+00"
    columns = ", ".join(BACKGROUND_COLUMNS)
    with connection.cursor() as cursor, cursor.copy(f"COPY factors_dataentry ({columns}) FROM STDIN") as copy:
        for start in range(0, rows, 50_000):
            lines = []
            for row in range(start + 2, min(start + 50_000, rows) + 2):
                haul, cabin = rng.choice(hauls), rng.choices(cabins, (80, 18, 2))[0]
                lines.append(
                    f"{module_id}\tplane\t2024\t{rng.randint(50, 12000)}."
                    f"{rng.randint(0, 99):02d}\tkm\t"
                    f'{{"haul": "{haul}", "cabin": "{cabin}"}}\tcsv\t0\t{row}\t'
                    f"{now}\t{now}\n"
                )
            copy.write("".join(lines))


# --- output -------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]
    host = str(connection.get_connection_params().get("host", ""))
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "postgresql": version,
        "database": "embedded (pgserver)" if host.startswith("/") else "DATABASE_URL",
    }


def table(f: dict[str, Any]) -> str:
    e2e, copy, bulk, real = f["end_to_end"], f["copy"], f["bulk_create"], f["real_copy"]
    pipe, ui = e2e["pipeline"], f["interactive"]
    m = f["machine"]

    def row(label: str, seconds: float, rate: int, ratio: float, real_ratio: float | None) -> str:
        real_share = "" if real_ratio is None else f"{real_ratio:.1%}"
        return f"| {label:<50} | {seconds:>8.2f} | {rate:>10,} | {ratio:>7.1%} | {real_share:>13} |"

    lines = [
        f"{f['rows']:,} plane entries ({f['file_mb']} MB CSV); {m['nproc']} CPUs, {m['cpu']}; "
        f"PostgreSQL {m['postgresql']} ({m['database']}); Python {m['python']}",
        "",
        f"| {'':<50} | {'seconds':>8} | {'rows/s':>10} | {'vs COPY':>7} | {'vs table COPY':>13} |",
        f"|{'-' * 52}|{'-' * 10}|{'-' * 12}|{'-' * 9}|{'-' * 15}|",
        row("PostgreSQL COPY into a bare table", copy["seconds"], copy["rows_per_s"], 1.0, None),
        row(
            "PostgreSQL COPY into factors_dataentry",
            real["seconds"],
            real["rows_per_s"],
            real["vs_copy"],
            1.0,
        ),
        row(
            f"Django bulk_create ({bulk['rows']:,} rows)",
            bulk["seconds"],
            bulk["rows_per_s"],
            bulk["vs_copy"],
            bulk["vs_real_copy"],
        ),
        row(
            "End to end: POST → entries, emissions, stats",
            e2e["seconds"],
            e2e["rows_per_s"],
            e2e["vs_copy"],
            e2e["vs_real_copy"],
        ),
        row(
            "  of which the pipeline, after the 202",
            pipe["seconds"],
            pipe["rows_per_s"],
            pipe["vs_copy"],
            pipe["vs_real_copy"],
        ),
        "",
        f"End to end / table COPY: {e2e['vs_real_copy']:.1%} (aim: at least 50%"
        + (", met)" if e2e["vs_real_copy"] >= 0.5 else ", not met)")
        + f"; table COPY rows typed by CopyRows beforehand in {real['format_seconds']:.2f} s, "
        "not counted.",
        f"Upload (multipart, validation, staging): {e2e['upload_seconds']:.2f} s; jobs: "
        + ", ".join(_busy(name, kind) for name, kind in e2e["jobs"].items())
        + " (busy time; they overlap)",
        f"Worker peak RSS: {e2e['worker_peak_rss_mb']} MB. Check: {e2e['checked']}.",
        f"Interactive, module of {ui['entries_in_module']:,} entries, {ui['requests']} requests: "
        f"p50 {ui['p50_ms']} ms, p95 {ui['p95_ms']} ms ("
        + ", ".join(f"{k} p95 {v['p95_ms']} ms" for k, v in ui["by_method"].items())
        + ")",
    ]
    return "\n".join(lines)


def interactive_table(f: dict[str, Any]) -> str:
    """The figures of ``--interactive-only``: the background, then the interactive line."""
    bg, ui, m = f["background"], f["interactive"], f["machine"]
    return "\n".join(
        [
            f"{bg['rows']:,} background entries ({bg['emissions']:,} emissions) loaded in "
            f"{bg['seconds']:.2f} s; {m['nproc']} CPUs, {m['cpu']}; PostgreSQL {m['postgresql']} "
            f"({m['database']}); Python {m['python']}",
            "",
            f"Interactive, module of {ui['entries_in_module']:,} entries, {ui['requests']} requests: "
            f"p50 {ui['p50_ms']} ms, p95 {ui['p95_ms']} ms ("
            + ", ".join(f"{k} p95 {v['p95_ms']} ms" for k, v in ui["by_method"].items())
            + ")",
            "By method: "
            + ", ".join(
                f"{k} p50 {v['p50_ms']} ms / p95 {v['p95_ms']} ms" for k, v in ui["by_method"].items()
            ),
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
