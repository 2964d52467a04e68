"""How long the reaper takes back the jobs of a node that died holding them.

    .venv/bin/python bench/reaper.py [--jobs 50,500] [--rounds 3]

On a scratch database (created and dropped here, on the project's server), for each
count: that many jobs are claimed by a worker that then stops heartbeating (its leases
are stamped in the past), half of them started; ``reaper.reap()`` takes them back in
rounds of at most 500. Printed per count: the rounds' median time, and per job.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="50,500", help="jobs held by the dead node, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from bench import setup_django
    from bench.engine import scratch_database

    setup_django("bench.settings")
    with scratch_database("bench_reaper"):
        rows = [(n, measure(n, args.rounds)) for n in (int(x) for x in args.jobs.split(","))]
    print(table(rows))
    return 0


def measure(count: int, rounds: int) -> float:
    """The median seconds of a reaper round that takes back ``count`` expired jobs."""
    from datetime import timedelta

    from django.db import connection

    from jobs import clock, engine, reaper
    from jobs.models import Job

    times = []
    for _ in range(rounds):
        Job.objects.all().delete()
        engine.enqueue_many("bench.noop", [{}] * count)
        batch = engine.claim("dead-node", limit=count)
        engine.start(batch.jobs[: count // 2], batch.token)
        Job.objects.filter(state=Job.State.RUNNING).update(
            lease_expires_at=clock.now() - timedelta(seconds=1)
        )
        connection.cursor().execute("VACUUM ANALYZE jobs_job")
        started = time.perf_counter()
        result = reaper.reap(limit=500)
        while result.rescued + result.failed < count and Job.objects.filter(state="running").exists():
            result = reaper.reap(limit=500)
        times.append(time.perf_counter() - started)
        assert not Job.objects.filter(state=Job.State.RUNNING).exists()
    return statistics.median(times)


def table(rows: list[tuple[int, float]]) -> str:
    header = f"{'expired jobs':>12}  {'round ms':>9}  {'per job ms':>10}"
    lines = [header, "-" * len(header)]
    lines += [f"{n:12,}  {seconds * 1000:9.1f}  {seconds * 1000 / n:10.2f}" for n, seconds in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
