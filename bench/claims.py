"""What fair claims between tenants cost a claim.

    .venv/bin/python bench/claims.py [--backlog N] [--rounds N]

On a scratch database (created and dropped here, on the project's server), one tenant
has ``--backlog`` due jobs; two workers are registered. Each case times ``engine.claim``
(limit 1, the claim of slow jobs; and limit 50, the batch of fast ones), handing the
claimed jobs straight back so that every round sees the same backlog:

- fairness off (``JOBS_TENANT_SHARE=1``): the plain claim;
- fair, nobody crowded: the tenant runs on no other worker;
- fair, crowded, nothing else due: the tenant already holds the other worker, so its
  jobs come second, and the claim walks its whole backlog looking for another's first;
- fair, crowded, another tenant's job last: the same walk ends at that job.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    from bench import setup_django
    from bench.engine import scratch_database

    setup_django("bench.settings")
    with scratch_database("bench_claims"):
        print(table(measure(args.backlog, args.rounds)))
    return 0


def measure(backlog: int, rounds: int) -> list[tuple[str, float, float, float]]:
    from django.db import connection
    from django.test import override_settings

    from jobs import clock, engine
    from jobs.models import Worker
    from tenancy.models import Tenant

    now = clock.now()
    for name in ("w1", "w2"):
        Worker.objects.create(name=name, hostname="bench", pid=1, started_at=now, last_seen_at=now)
    busy = Tenant.objects.create(name="Busy", slug="busy")
    engine.enqueue_many("bench.noop", [{}] * backlog, tenant=busy)

    def case(label: str, share: float) -> tuple[str, float, float, float]:
        # Each claim and hand-back leaves dead index entries at the head of the queue;
        # vacuumed away before each case, so that no case pays for the one before.
        connection.cursor().execute("VACUUM ANALYZE jobs_job")
        with override_settings(JOBS_TENANT_SHARE=share):
            one = samples(lambda: engine.claim("w1", limit=1), rounds)
            fifty = samples(lambda: engine.claim("w1", limit=50), rounds // 4)
        return label, statistics.median(one), percentile(one, 95), statistics.median(fifty)

    rows = [case("fairness off", 1), case("fair, nobody crowded", 0.5)]
    engine.claim("w2", limit=1)  # the busy tenant now holds the other worker
    rows.append(case("fair, crowded, nothing else due", 0.5))
    other = Tenant.objects.create(name="Other", slug="other")
    engine.enqueue("bench.noop", {}, tenant=other)
    rows.append(case("fair, crowded, another's job last", 0.5))
    return rows


def samples(claim: Callable[[], object], rounds: int) -> list[float]:
    from jobs import engine

    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        batch = claim()
        times.append((time.perf_counter() - started) * 1000)
        engine.release(batch.jobs, batch.token)  # type: ignore[attr-defined]
    return times


def percentile(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def table(rows: list[tuple[str, float, float, float]]) -> str:
    header = f"{'case':36}  {'limit 1 p50 ms':>14}  {'limit 1 p95 ms':>14}  {'limit 50 p50 ms':>15}"
    lines = [header, "-" * len(header)]
    lines += [f"{label:36}  {p50:14.2f}  {p95:14.2f}  {batch:15.2f}" for label, p50, p95, batch in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
