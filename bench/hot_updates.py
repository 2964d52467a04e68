"""How the job table's rows are rewritten while a backlog drains.

On a scratch database (created, migrated and dropped here, on the project's server),
enqueue ``--jobs`` no-op jobs, drain them with the engine's in-process worker, and print
from ``pg_stat_user_tables`` how many updates each job cost and how many of them were
heap-only (HOT: a new row version on the same page, with no new index entries). Run
with ``--fillfactor`` to try another layout on the same code.

    python -m bench.hot_updates --jobs 5000 [--fillfactor 100]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench import setup_django
from bench.engine import scratch_database


def counters(cursor: Any) -> tuple[int, int]:
    """Updates and HOT updates of the job table, with this session's pending counts
    flushed first (PostgreSQL 15 and later publish them asynchronously)."""
    cursor.execute("SELECT pg_stat_force_next_flush()")
    cursor.execute("SELECT pg_stat_clear_snapshot()")
    cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'jobs_job'")
    updates, hot = cursor.fetchone()
    return updates, hot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--fillfactor", type=int, help="set on the job table before the drain (10-100)")
    args = parser.parse_args()
    setup_django("bench.settings")

    from django.db import connection

    import jobs

    with scratch_database("bench_hot") as version, connection.cursor() as cursor:
        if args.fillfactor is not None:
            cursor.execute(f"ALTER TABLE jobs_job SET (fillfactor = {int(args.fillfactor)})")
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'jobs_job'")
        layout = ", ".join(cursor.fetchone()[0] or ["fillfactor=100 (default)"])
        jobs.enqueue_many("bench.noop", [{} for _ in range(args.jobs)])
        before = counters(cursor)
        started = time.perf_counter()
        jobs.run_until_idle()
        seconds = time.perf_counter() - started
        time.sleep(1)  # the workers' connections publish their counts on their own
        after = counters(cursor)
        updates, hot = after[0] - before[0], after[1] - before[1]
        print(f"PostgreSQL {version}; job table: {layout}; {args.jobs:,} no-op jobs drained in-process")
        print()
        print("updates/job  HOT updates  HOT share  drain s")
        print("-----------  -----------  ---------  -------")
        print(f"{updates / args.jobs:11.2f}  {hot:11,}  {hot / max(updates, 1):8.0%}  {seconds:7.1f}")


if __name__ == "__main__":
    main()
