"""What one local hook launch costs: ``LocalRunner.launch`` of a no-op hook, end to end.

    .venv/bin/python bench/hook_launch.py [--against COMMIT] [--rounds 4] [--launches 100]

Each round runs ``--launches`` launches of ``/usr/bin/true`` (no batch to copy) in a fresh
process of this tree, then in one of ``COMMIT`` (exported with ``git archive`` into a
temporary directory), alternating, so that both see the same machine in the same
minutes. A process runs Django set up, as a worker would, so the fork sees a worker's
memory; as root, hooks run as ``nobody`` (``INGEST_HOOK_USER``), as in production.
Prints per-round p50, p95 and mean milliseconds per launch, and the medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEASURE = """
import json, statistics, sys, time
import django
django.setup()
from ingest import conf
from ingest.runs.runners.base import HookSpec
from ingest.runs.runners.local import LocalRunner
runner = LocalRunner(path="/usr/bin:/bin", user=str(conf.get("HOOK_USER") or ""))
spec = HookSpec(name="conveyor-hook-1-1", image="unused", command=("/usr/bin/true",))
runner.launch(spec)  # warm: the first launch pays for imports
times = []
for _ in range(int(sys.argv[1])):
    started = time.perf_counter()
    status = runner.launch(spec)
    times.append((time.perf_counter() - started) * 1000)
    assert status.exit_code == 0, status
times.sort()
print(json.dumps({"p50": statistics.median(times), "p95": times[int(0.95 * (len(times) - 1))],
                  "mean": statistics.fmean(times)}))
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="", help="A commit to compare with (git archive).")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--launches", type=int, default=100)
    return parser.parse_args()


def measure(tree: Path, launches: int) -> dict[str, float]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "CONVEYOR_ALLOW_DEV_SECRET": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(launches)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def export(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", commit], cwd=ROOT, capture_output=True, check=True, timeout=120
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True, timeout=120)
    return into


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-") as scratch:
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = export(args.against, Path(scratch))
        results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                results[name].append(measure(tree, args.launches))
    print(
        f"{args.launches} launches of /usr/bin/true per round, {args.rounds} rounds alternating, "
        f"uid {os.geteuid()}"
    )
    print("| code | p50 ms per round | p95 ms per round | median p50 | median mean |")
    print("|---|---|---|---:|---:|")
    for name, rounds in results.items():
        p50s = " / ".join(f"{r['p50']:.1f}" for r in rounds)
        p95s = " / ".join(f"{r['p95']:.1f}" for r in rounds)
        print(
            f"| {name} | {p50s} | {p95s} | {statistics.median(r['p50'] for r in rounds):.1f} | "
            f"{statistics.median(r['mean'] for r in rounds):.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
