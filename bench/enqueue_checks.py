"""What checking its arguments costs an enqueue, in the calling process.

    .venv/bin/python bench/enqueue_checks.py [--calls N]

No database: each case times ``jobs.engine`` preparing the INSERT's parameters from an
enqueue's arguments (every check of ``jobs.arguments``, the payload encoded, the clock
read, the parameters built), against ``json.dumps`` of the same payloads alone, which is
all an enqueue did with its arguments before they were checked besides reading the clock
and building the parameters. "added" is therefore an upper bound of what the checks
cost each job, to set beside its round trip to PostgreSQL (several hundred microseconds
for ``enqueue``; tens, per job, for ``enqueue_many``). CPU time of this process, best of
five runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FACTORS_LIKE = {"data_entry_type": "plane", "module": 1234, "years": [2024], "closes": 98765}
WIDE = {f"field_{n}": {"name": f"value {n} é", "ids": list(range(10)), "ok": n % 2 == 0} for n in range(50)}
OPTIONS = {
    "unique_key": "factors.ingest:module1234:plane",
    "concurrency_key": "module:1234",
    "tenant": 7,
    "parent": 123_456,
    "pipeline": uuid.uuid4(),
    "run_after": datetime(2026, 11, 26, 9, 0, tzinfo=UTC),
    "priority": 5,
}


def best_microseconds(call: Callable[[], Any], calls: int, per: int = 1) -> float:
    """CPU microseconds per item of ``call`` (which handles ``per`` items), best of five."""
    runs = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(calls):
            call()
        runs.append(time.process_time() - started)
    return min(runs) / calls / per * 1e6


def cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any], int]]:
    from jobs import engine

    def one(payload: dict[str, Any], **options: Any) -> Callable[[], Any]:
        return lambda: engine.check_enqueue("bench.noop", payload, **options)

    batch = [{"n": n} for n in range(1_000)]
    return [
        ("enqueue {}", one({}), lambda: json.dumps({}), 1),
        ("enqueue {'n': 1}", one({"n": 1}), lambda: json.dumps({"n": 1}), 1),
        ("enqueue, factors payload", one(FACTORS_LIKE), lambda: json.dumps(FACTORS_LIKE), 1),
        (
            "  + keys, tenant, parent, pipeline, run_after",
            one(FACTORS_LIKE, **OPTIONS),
            lambda: json.dumps(FACTORS_LIKE),
            1,
        ),
        (f"enqueue, {len(json.dumps(WIDE)):,}-byte payload", one(WIDE), lambda: json.dumps(WIDE), 1),
        (
            "enqueue_many, per payload of 1,000",
            lambda: engine._prepare(
                "bench.noop", batch, [None] * len(batch), [None] * len(batch), {}, many=True
            ),
            lambda: [json.dumps(p) for p in batch],
            len(batch),
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    from bench.engine import setup_django

    setup_django("bench.settings")
    rows = []
    for label, checked, encoded, per in cases():
        calls = max(args.calls // per, 20)
        checked_us = best_microseconds(checked, calls, per)
        encoded_us = best_microseconds(encoded, calls, per)
        rows.append((label, encoded_us, checked_us, checked_us - encoded_us))
    print("CPU µs per job                                    json.dumps only  checked  added")
    for label, encoded_us, checked_us, added in rows:
        print(f"{label:<48} {encoded_us:>15.1f} {checked_us:>8.1f} {added:>6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
