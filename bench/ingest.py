"""Ingest runs: what the pipeline costs per batch, and how hard it presses a full cluster.

    .venv/bin/python bench/ingest.py [--batches 1000] [--records 10] [--json]

On a scratch database created (and dropped) on the project's server (the embedded
PostgreSQL, or ``DATABASE_URL``):

- orchestration: one run of ``--batches`` batches of ``--records`` records, each batch
  through its three deliveries (RunIngester, RunHooks with one no-op local hook — the
  ``true`` command — and PublishBatch), run by the engine in this process. Per batch: the
  sum of its deliveries' handler times (events, deliveries, state changes, staging, the
  hook's process, publishing), p50 and p95; and the whole run's wall time, claims
  included, as batches per second.
- pressure: 20 runs × 10 batches from 3 tenants (each run failing after 10 hook
  failures) against the tests' fake Kubernetes API server (``devtools/fakes/kubernetes.py``)
  refusing every Job create (403 "exceeded quota", which the runner counts as cluster
  pressure), with and without the runner's breaker, for ``--pressure-minutes`` of the
  engine's clock moved from each due job to the next (no waiting): Job create calls per
  minute of that clock, and how many runs had failed by then.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument(
        "--pressure-minutes", type=float, default=60.0, help="Simulated minutes of full refusal (default 60)."
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    return parser.parse_args()


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def register_bench_source() -> None:
    """A source that answers at once: the figure is the pipeline's, not a source's."""
    from rest_framework import serializers

    from ingest.runs.ingesters.base import Fetched, Ingester, register

    class Config(serializers.Serializer):
        batches = serializers.IntegerField(min_value=1)
        records = serializers.IntegerField(min_value=0)

    @register
    class Generated(Ingester):
        kind = "bench_generated"
        label = "Generated records (bench)"
        config_serializer = Config

        def fetch(
            self, config: dict[str, Any], session: dict[str, Any], batch_size: int, *, tenant: str
        ) -> Fetched:
            number = session.get("next", 1)
            records = [{"id": f"{number}-{i}", "value": i} for i in range(config["records"])]
            return Fetched(records, {"next": number + 1}, number < config["batches"])


def orchestration(batches: int, records: int) -> dict[str, float]:
    import jobs
    from ingest.runs import services
    from ingest.runs.models import Hook, HookTemplate, IngestRun, IngestSource
    from jobs.models import Job
    from tenancy.models import Tenant

    tenant = Tenant.objects.create(name="Bench", slug="bench")
    source = IngestSource.objects.create(
        tenant=tenant,
        name="generated",
        kind="bench_generated",
        config={"batches": batches, "records": records},
    )
    noop = HookTemplate.objects.create(name="bench-noop", image="none", command=["true"])
    Hook.objects.create(source=source, name="noop", template=noop)
    run = services.start_ingest(source)
    per_batch: dict[int, float] = {}
    with timed_handlers(per_batch):
        started = time.perf_counter()
        while jobs.run_until_idle():
            pass
        wall = time.perf_counter() - started
    run = IngestRun.objects.get(pk=run.pk)
    assert run.status == "succeeded", (run.status, run.failure_reason)
    times = list(per_batch.values())
    return {
        "batches": len(times),
        "p50_ms": statistics.median(times),
        "p95_ms": percentile(times, 95),
        "wall_s": wall,
        "batches_per_s": len(times) / wall,
        "wall_ms_per_batch": wall * 1000 / len(times),
        "deliveries": Job.objects.filter(pipeline_id=run.pipeline).count(),
    }


@contextlib.contextmanager
def timed_handlers(per_batch: dict[int, float]):
    """Time each call of the pipeline's three handlers, summed per batch: everything a
    delivery does, from its handler's start to its return (the engine's claim and the
    commit of its outcome are in the wall time only)."""
    from jobs import registry

    originals = {
        name: registry.get(name) for name in ("ingest.RunIngester", "ingest.RunHooks", "ingest.PublishBatch")
    }

    def timed(func):
        def call(ctx):
            started = time.perf_counter()
            try:
                return func(ctx)
            finally:
                sequence = ctx.payload["payload"]["sequence"]
                per_batch[sequence] = per_batch.get(sequence, 0.0) + (time.perf_counter() - started) * 1000

        return call

    for name, handler in originals.items():
        registry._handlers[name] = dataclasses.replace(handler, func=timed(handler.func))
    try:
        yield
    finally:
        registry._handlers.update(originals)


def table(result: dict[str, Any]) -> str:
    o = result["orchestration"]
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"PostgreSQL {result['server']}",
        "",
        "| orchestration | batches | handlers p50 ms/batch | p95 | wall ms/batch | batches/s |",
        "|---|---:|---:|---:|---:|---:|",
        f"| one run, no-op local hook | {o['batches']:,} | {o['p50_ms']:.1f} | {o['p95_ms']:.1f} | "
        f"{o['wall_ms_per_batch']:.1f} | {o['batches_per_s']:.1f} |",
    ]
    pressure = result.get("pressure")
    if pressure:
        lines += [
            "",
            "| full refusal (engine clock) | minutes | create calls | calls/min | runs failed |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in pressure:
            lines.append(
                f"| {row['case']} | {row['minutes']:.0f} | {row['creates']:,} | "
                f"{row['per_minute']:.1f} | {row['failed']}/{row['runs']} |"
            )
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    from bench import setup_django
    from bench.engine import scratch_database

    setup_django("bench.settings")

    with scratch_database("bench_ingest") as server:
        register_bench_source()
        result: dict[str, Any] = {
            "server": server,
            "orchestration": orchestration(args.batches, args.records),
        }
        pressure = _pressure_cases(args.pressure_minutes)
        if pressure is not None:
            result["pressure"] = pressure
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


def _pressure_cases(minutes: float) -> list[dict[str, Any]]:
    """Full refusal for ``minutes`` of the engine's clock, with the breaker and without
    it (a threshold nothing reaches); the fake API server is the tests' own."""
    return [
        _refusal(label, threshold, minutes)
        for label, threshold in (("with the breaker", 5), ("without the breaker", 10**9))
    ]


def _refusal(label: str, threshold: int, minutes: float) -> dict[str, Any]:
    import tempfile
    from datetime import timedelta

    from django.test import override_settings

    import jobs
    from devtools.fakes.kubernetes import FakeCluster
    from ingest.runs import services
    from ingest.runs.models import Hook, HookTemplate, IngestRun, IngestSource, RunnerBreaker
    from jobs.clock import ManualClock, use_clock
    from jobs.models import Job
    from tenancy.models import Tenant

    clock = ManualClock()
    start = clock.now()
    end = start + timedelta(minutes=minutes)
    RunnerBreaker.objects.all().delete()
    with use_clock(clock), FakeCluster(clock=clock.now) as cluster, tempfile.TemporaryDirectory() as scratch:
        cluster.refuse_creates(403, 'jobs.batch "hook" is forbidden: exceeded quota: hooks')
        config = cluster.kubeconfig(f"{scratch}/kubeconfig")
        with override_settings(
            INGEST_HOOK_RUNNER="kubernetes",
            INGEST_KUBECONFIG=str(config),
            INGEST_KUBE_NAMESPACE=cluster.namespace,
            INGEST_BREAKER_THRESHOLD=threshold,
        ):
            runs = []
            for n in range(20):
                tenant, _ = Tenant.objects.get_or_create(
                    slug=f"pressure{n % 3}", defaults={"name": f"Pressure {n % 3}"}
                )
                source = IngestSource.objects.create(
                    tenant=tenant,
                    name=f"refused-{threshold}-{n}",
                    kind="bench_generated",
                    config={"batches": 10, "records": 1},
                    max_failures=10,
                )
                check, _ = HookTemplate.objects.get_or_create(
                    name="bench-check", defaults={"image": "hooks:1", "command": ["check"]}
                )
                Hook.objects.create(source=source, name="check", template=check)
                runs.append(services.start_ingest(source).pk)
            while clock.now() < end:
                jobs.run_until_idle()
                upcoming = Job.objects.filter(state="pending").order_by("run_after").first()
                if upcoming is None:
                    break
                clock.advance(max((upcoming.run_after - clock.now()).total_seconds(), 0) + 0.001)
            creates = cluster.create_calls
        for job in Job.objects.filter(state__in=["pending", "running"]):
            jobs.cancel(job, reason="the bench is over")
        failed = IngestRun.objects.filter(pk__in=runs, status="failed").count()
        IngestRun.objects.filter(pk__in=runs, status="running").update(
            status="cancelled", finished_at=clock.now()
        )
    elapsed = min(clock.now(), end) - start
    return {
        "case": label,
        "minutes": elapsed / timedelta(minutes=1),
        "creates": creates,
        "per_minute": creates / max(elapsed / timedelta(minutes=1), 1e-9),
        "failed": failed,
        "runs": len(runs),
    }


if __name__ == "__main__":
    raise SystemExit(main())
