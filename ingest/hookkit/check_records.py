"""Check a batch's records before they are published: every line a JSON object carrying
the required fields, with no key seen twice.

    python -m ingest.hookkit.check_records --require id,amount [--unique id]

Reads the batch from ``INGEST_BATCH_URL`` (a local path, or any fsspec URL when fsspec
is installed). Exits 0 when every record passes; otherwise prints the first problems
(batch line numbers, at most 20) and exits 1, so the batch is not published.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import IO

MAX_REPORTED = 20


def _open(location: str) -> IO[bytes]:
    if "://" in location:
        import fsspec  # only for object stores: a local batch needs nothing but Python

        return fsspec.open(location, "rb").open()
    return open(location, "rb")  # noqa: SIM115 (closed by the caller)


def problems(lines: Iterator[bytes], required: list[str], unique: str | None) -> Iterator[str]:
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield f"line {number}: not JSON ({exc.msg})"
            continue
        except UnicodeDecodeError as exc:  # json.loads decodes the bytes first
            yield f"line {number}: not JSON (not UTF-8: {exc.reason})"
            continue
        if not isinstance(record, dict):
            yield f"line {number}: not a JSON object"
            continue
        missing = [name for name in required if record.get(name) in (None, "")]
        if missing:
            yield f"line {number}: missing {', '.join(missing)}"
        if unique is not None and record.get(unique) is not None:
            key = str(record[unique])
            if key in seen:
                yield f"line {number}: {unique} {key!r} seen twice"
            seen.add(key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--require", default="", help="Comma-separated fields every record needs.")
    parser.add_argument("--unique", default=None, help="A field no two records may share.")
    args = parser.parse_args(argv)
    location = os.environ.get("INGEST_BATCH_URL", "")
    if not location:
        print("INGEST_BATCH_URL is not set", file=sys.stderr)
        return 2
    required = [name for name in args.require.split(",") if name]
    with _open(location) as batch:
        found = list(problems(iter(batch), required, args.unique))
    where = f"batch {os.environ.get('INGEST_BATCH', '?')} of run {os.environ.get('INGEST_RUN', '?')}"
    if not found:
        print(f"{where}: every record passed")
        return 0
    for problem in found[:MAX_REPORTED]:
        print(problem)
    print(f"{where}: {len(found)} problem(s)")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
