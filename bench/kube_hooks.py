"""Hooks on Kubernetes: how fairly tenants share a small cluster, and what a batch costs
in API calls.

    .venv/bin/python -m bench.kube_hooks [--json] [--capacities 1,2] [--hook-seconds 5,30,120]

Run it as a module from the checkout's root (``bench/ingest.py`` would stand in for the
``ingest`` package if ``bench/`` were the script's directory). On a scratch database
created (and dropped) on the project's server, against the tests' fake Kubernetes API
(``devtools/fakes/kubernetes.py``), on the engine's manual clock moved from each due job to the next
(no waiting; every time below is on that clock, not the wall's):

- fairness: tenant A starts a 12-batch run; 1 s and 2 s later tenants B and C start a
  2-batch run each; each batch has one hook of 5 s (1 s ContainerCreating), on a cluster with
  room for ``--capacities`` hooks. Per tenant: seconds from its run's start to its first
  batch published, and to its run's end; and the order of the Job creates.
- calls: one run of 10 batches, one hook each, on a cluster with room for all, for each
  of ``--hook-seconds``: the API requests the runner made per batch, by kind (creates,
  Job reads, Pod lists, Event lists, log reads, deletes, watches, all), and how long after
  its Job completed each batch's hook was seen to have ended (the mean).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

IMAGE = "registry.example/hooks:1"
KINDS = ("create", "job read", "job list", "pod list", "event list", "log read", "delete", "watch", "other")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacities", default="1,2")
    parser.add_argument("--hook-seconds", default="5,30,120")
    parser.add_argument("--skip", choices=("fairness", "calls"), default=None)
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    return parser.parse_args()


def kind_of(call: Any) -> str:
    """What a request to the fake was, as the runner's figures count it."""
    if call.query.get("watch") in ("1", "true", "True"):
        return "watch"
    method, path = call.method, call.path
    if method == "POST" and path.endswith("/jobs"):
        return "create"
    if method == "DELETE":
        return "delete"
    if method == "GET":
        if "/jobs/" in path:
            return "job read"
        if path.endswith("/jobs"):
            return "job list"
        if path.endswith("/log"):
            return "log read"
        if path.endswith("/pods"):
            return "pod list"
        if path.endswith("/events"):
            return "event list"
    return "other"


class Cluster:
    """The fake API server on ``clock``, with the runner's settings pointed at it."""

    def __init__(self, clock: Any, capacity: int | None, run_seconds: float) -> None:
        from django.test import override_settings

        from devtools.fakes.kubernetes import Behaviour, FakeCluster

        self.scratch = tempfile.TemporaryDirectory()
        self.fake = FakeCluster(clock=clock.now, capacity=capacity)
        self.fake.behaviours[IMAGE] = Behaviour(run_seconds=run_seconds, create_seconds=1)
        self.fake.start()
        config = self.fake.kubeconfig(f"{self.scratch.name}/kubeconfig")
        self.settings = override_settings(
            INGEST_HOOK_RUNNER="kubernetes",
            INGEST_KUBECONFIG=str(config),
            INGEST_KUBE_NAMESPACE=self.fake.namespace,
        )

    def __enter__(self) -> Any:
        self.settings.enable()
        return self.fake

    def __exit__(self, *exc: Any) -> None:
        self.settings.disable()
        self.fake.stop()
        self.scratch.cleanup()


def drive(clock: Any, at: dict[float, Any] | None = None) -> None:
    """Every due job, then the clock to the next one (or to the next of ``at``'s starts,
    each called once its second of the clock is reached), until nothing is pending."""
    import jobs
    from jobs.models import Job

    start = clock.now()
    starts = dict(sorted((at or {}).items()))
    for _ in range(100_000):
        elapsed = (clock.now() - start).total_seconds()
        for second in [s for s in starts if s <= elapsed]:
            starts.pop(second)()
        jobs.run_until_idle()
        upcoming = Job.objects.filter(state="pending", waits=False).order_by("run_after").first()
        due = [(upcoming.run_after - clock.now()).total_seconds()] if upcoming else []
        due += [second - elapsed for second in starts]
        if not due:
            return
        clock.advance(max(min(due), 0) + 0.001)
    raise RuntimeError("the runs did not settle")


def reset() -> None:
    from ingest.runs.models import IngestRun, RunnerBreaker
    from jobs.models import Job

    Job.objects.all().delete()
    IngestRun.objects.all().delete()
    RunnerBreaker.objects.all().delete()


def fairness(capacity: int) -> dict[str, Any]:
    from ingest.runs import services
    from ingest.runs.models import BatchStatus, IngestRun
    from jobs.clock import ManualClock, use_clock
    from tenancy.models import Tenant

    reset()
    clock = ManualClock()
    runs: dict[str, int] = {}

    def start(slug: str, batches: int):
        def begin() -> None:
            tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug})
            runs[slug] = services.start_ingest(source(tenant, f"fair-{slug}-{capacity}", batches)).pk

        return begin

    with use_clock(clock), Cluster(clock, capacity, 5) as cluster:
        drive(clock, {0: start("a", 12), 1: start("b", 2), 2: start("c", 2)})
        tenant_of = {str(run): slug for slug, run in runs.items()}
        order = [
            tenant_of.get(job["metadata"]["labels"]["conveyor.io/run"], "?") for job in cluster.received_jobs
        ]
    figures = {}
    for slug, pk in runs.items():
        run = IngestRun.objects.get(pk=pk)
        assert run.status == "succeeded", (slug, run.status, run.failure_reason)
        first = min(run.batches.filter(status=BatchStatus.PUBLISHED).values_list("published_at", flat=True))
        figures[slug] = {
            "first_s": (first - run.started_at).total_seconds(),
            "total_s": (run.finished_at - run.started_at).total_seconds(),
        }
    return {"capacity": capacity, "tenants": figures, "creates": "".join(order)}


def source(tenant: Any, name: str, batches: int) -> Any:
    from ingest.runs.models import Hook, HookTemplate, IngestSource

    made = IngestSource.objects.create(
        tenant=tenant,
        name=name,
        kind="bench_generated",
        config={"batches": batches, "records": 1},
        max_failures=batches,
    )
    check, _ = HookTemplate.objects.get_or_create(
        name="bench-kube-check", defaults={"image": IMAGE, "command": ["check"]}
    )
    Hook.objects.create(source=made, name="check", template=check)
    return made


def calls(run_seconds: float, batches: int = 10) -> dict[str, Any]:
    from ingest.runs import services
    from ingest.runs.models import HookExecution, IngestRun
    from jobs.clock import ManualClock, use_clock
    from tenancy.models import Tenant

    reset()
    clock = ManualClock()
    tenant, _ = Tenant.objects.get_or_create(slug="calls", defaults={"name": "Calls"})
    with use_clock(clock), Cluster(clock, None, run_seconds) as cluster:
        run = services.start_ingest(source(tenant, f"calls-{run_seconds}", batches))
        completed: dict[str, Any] = {}

        def seen_complete() -> None:
            for name in cluster.jobs():
                job = cluster.job(name) or {}
                done = (job.get("status") or {}).get("completionTime")
                if done and name not in completed:
                    completed[name] = done

        drive_watching(clock, seen_complete)
        counted = Counter(kind_of(call) for call in cluster.calls)
    run = IngestRun.objects.get(pk=run.pk)
    assert run.status == "succeeded", (run.status, run.failure_reason)
    lags = []
    for execution in HookExecution.objects.filter(batch__run=run):
        done = completed.get(execution.runner_ref)
        if done:
            from datetime import datetime

            finished = datetime.fromisoformat(done.replace("Z", "+00:00"))
            lags.append((execution.finished_at - finished).total_seconds())
    per_batch = {kind: counted.get(kind, 0) / batches for kind in KINDS}
    per_batch["all"] = sum(counted.values()) / batches
    return {
        "hook_seconds": run_seconds,
        "batches": batches,
        "per_batch": per_batch,
        "noticed_after_s": statistics.mean(lags) if lags else None,
    }


def drive_watching(clock: Any, each: Any) -> None:
    """``drive``, looking at the cluster after each round (outside the runner's count:
    the fake's own accessors make no requests)."""
    import jobs
    from jobs.models import Job

    for _ in range(100_000):
        jobs.run_until_idle()
        each()
        upcoming = Job.objects.filter(state="pending", waits=False).order_by("run_after").first()
        if upcoming is None:
            return
        step = max((upcoming.run_after - clock.now()).total_seconds(), 0) + 0.001
        # A Job's completion is stamped to the second: look at every second on the way.
        while step > 0:
            clock.advance(min(step, 1.0))
            step -= 1.0
            each()
    raise RuntimeError("the run did not settle")


def table(result: dict[str, Any]) -> str:
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"PostgreSQL {result['server']}; seconds on the engine's clock"
    ]
    if result.get("fairness"):
        lines += [
            "",
            "| capacity | A first / total s | B first / total s | C first / total s | creates in order |",
            "|---:|---:|---:|---:|---|",
        ]
        for row in result["fairness"]:
            cells = " | ".join(
                f"{row['tenants'][s]['first_s']:.0f} / {row['tenants'][s]['total_s']:.0f}" for s in "abc"
            )
            lines.append(f"| {row['capacity']} | {cells} | {row['creates'].upper()} |")
    if result.get("calls"):
        kinds = [k for k in (*KINDS, "all") if any(row["per_batch"].get(k) for row in result["calls"])]
        lines += [
            "",
            "| hook s | " + " | ".join(kinds) + " | noticed after s |",
            "|---:|" + "---:|" * (len(kinds) + 1),
        ]
        for row in result["calls"]:
            lag = row["noticed_after_s"]
            lines.append(
                f"| {row['hook_seconds']:.0f} | "
                + " | ".join(f"{row['per_batch'][k]:.1f}" for k in kinds)
                + f" | {'-' if lag is None else f'{lag:.1f}'} |"
            )
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    from bench import setup_django
    from bench.engine import scratch_database
    from bench.ingest import register_bench_source

    setup_django("bench.settings")
    result: dict[str, Any] = {}
    with scratch_database("bench_kube_hooks") as server:
        register_bench_source()
        result["server"] = server
        if args.skip != "fairness":
            result["fairness"] = [fairness(int(c)) for c in args.capacities.split(",")]
        if args.skip != "calls":
            result["calls"] = [calls(float(s)) for s in args.hook_seconds.split(",")]
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
