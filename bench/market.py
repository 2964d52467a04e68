"""Market data: what a day's load and a gap-fill cost, end to end.

    .venv/bin/python bench/market.py [--instruments 5000] [--repeat 3] [--json]

The fake market-data API runs as its own process (``python -m devtools.fakes.market_api``,
real HTTP on 127.0.0.1), the loads as engine jobs in this process, on a scratch database
created (and dropped) on the project's server (the embedded PostgreSQL, or
``DATABASE_URL``). Each case is timed from queueing to the last job done:

- one trading day of N instruments fetched, checked, normalised and upserted (a day not
  loaded before);
- the same day loaded again (every row unchanged: nothing written);
- a gap-fill over the last 7 days that finds 3 days missing and loads them;
- the daily batch that heals 3 missing days: the calendar, the three instrument lists,
  the 3 gaps and today.

Each row gives the best and the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instruments", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    return parser.parse_args()


@contextmanager
def fake_api(instruments: int) -> Iterator[str]:
    """The fake market-data API as a process of its own; its URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devtools.fakes.market_api",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--instruments",
            str(instruments),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        line = process.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the fake market-data API said {line!r}")
        yield line.removeprefix("listening on ")
    finally:
        process.terminate()
        process.wait(10)


def run_jobs() -> None:
    import jobs

    while jobs.run_until_idle():
        pass


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    run_jobs()
    return time.perf_counter() - started


def run(url: str, instruments: int, repeat: int) -> list[dict[str, Any]]:
    import jobs
    from market import batch, freshness, services
    from market.models import (
        DailyBar,
        DailyBatch,
        DayLoad,
        LoadStatus,
        LoadTrigger,
        MarketFeed,
        TradingDay,
    )
    from tenancy.models import Tenant

    tenant = Tenant.objects.create(name="Bench", slug="bench")
    feed = MarketFeed.objects.create(tenant=tenant, name="bench", api_url=url, token="demo-token")
    today = freshness.market_date(jobs.now())
    jobs.enqueue(batch.LOAD_CALENDAR, {"feed": feed.pk}, tenant=tenant.pk)
    run_jobs()
    open_days = list(
        TradingDay.objects.filter(feed=feed, is_open=True, cal_date__lt=today)
        .order_by("-cal_date")
        .values_list("cal_date", flat=True)[:60]
    )
    fresh = iter(open_days[7:])  # days no case below loads

    def load(day: date) -> None:
        batch.queue_loads(feed, [day], LoadTrigger.OPERATOR)

    def check_loaded(day: date) -> None:
        last = DayLoad.objects.filter(feed=feed, trade_date=day).order_by("-pk").first()
        assert last.status == LoadStatus.SUCCEEDED, (last.status, last.error)

    rows = []
    first, again = [], []
    for _ in range(repeat):
        day = next(fresh)
        first.append(timed(lambda day=day: load(day)))
        check_loaded(day)
        again.append(timed(lambda day=day: load(day)))
        check_loaded(day)
    bars = DailyBar.objects.filter(feed=feed, trade_date=day).count()
    rows.append(row(f"one trading day of {bars:,} bars, new", first))
    rows.append(row(f"the same day again ({bars:,} bars, none changed)", again))

    week = [day for day in open_days if day >= today - timedelta(days=7)]
    for day in week:
        load(day)
    run_jobs()
    fills = []
    for _ in range(repeat):
        DailyBar.objects.filter(feed=feed, trade_date__in=week[:3]).delete()
        fills.append(
            timed(
                lambda: services.gap_fill(feed, today - timedelta(days=7), today, actor=None, via="command")
            )
        )
        assert (
            DailyBar.objects.filter(feed=feed, trade_date__in=week[:3])
            .values("trade_date")
            .distinct()
            .count()
            == 3
        )
    rows.append(row("a gap-fill of the last 7 days, 3 days missing", fills))

    batches = []
    for n in range(repeat):
        DailyBar.objects.filter(feed=feed, trade_date__in=week[:3]).delete()
        DailyBatch.objects.filter(feed=feed).delete()
        batches.append(timed(lambda: batch.start(feed, today, now=jobs.now())))
        done = DailyBatch.objects.get(feed=feed, market_date=today)
        assert len(done.gaps) == 3, (n, done.gaps, done.note)
    rows.append(row("the daily batch healing 3 days (calendar, instruments, 3 gaps, today)", batches))
    return rows


def row(case: str, walls: list[float]) -> dict[str, Any]:
    return {"case": case, "runs": len(walls), "best_s": min(walls), "median_s": statistics.median(walls)}


def table(result: dict[str, Any]) -> str:
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"PostgreSQL {result['server']}; {result['instruments']:,} instruments",
        "",
        "| case | runs | best s | median s |",
        "|---|---:|---:|---:|",
    ]
    for item in result["rows"]:
        lines.append(f"| {item['case']} | {item['runs']} | {item['best_s']:.3f} | {item['median_s']:.3f} |")
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    from bench import setup_django
    from bench.engine import scratch_database

    setup_django("bench.settings")
    from django.test.utils import override_settings

    with (
        fake_api(args.instruments) as url,
        scratch_database("bench_market") as server,
        override_settings(INTAKE_HTTP_ALLOW=["127.0.0.1"]),
    ):
        result = {
            "server": server,
            "instruments": args.instruments,
            "rows": run(url, args.instruments, args.repeat),
        }
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
