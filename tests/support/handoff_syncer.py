"""A scraper process for the handoff race (tests/system/test_handoff_race.py).

For each round it waits at a starting gate (a PostgreSQL advisory lock that the test
holds and releases when both syncers are waiting on it), syncs the references
``ref-FIRST`` … ``ref-LAST`` of the source with the round's payloads, in scrape run
``round-R-NAME`` (so that each handoff says which process opened it), and prints one
JSON line of the sync's handoff counts.

    python -m tests.support.handoff_syncer NAME SOURCE_ID FIRST LAST ROUNDS GATE
"""

from __future__ import annotations

import json
import sys

import django


def reference(n: int) -> str:
    return f"ref-{n:03d}"


def payload(n: int, round_: int) -> dict:
    """The same in both processes for a reference and round; new in every round."""
    return {"title": reference(n), "round": round_}


def main(name: str, source_id: int, first: int, last: int, rounds: int, gate: int) -> None:
    django.setup()
    from django.db import connection

    from ingest.runs.models import IngestSource
    from ingest.scraping import services

    source = IngestSource.objects.get(pk=source_id)
    for round_ in range(rounds):
        items = [{"external_id": reference(n), "payload": payload(n, round_)} for n in range(first, last + 1)]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock_shared(%s, %s)", [gate, round_])
        counts = services.sync(source, f"round-{round_}-{name}", items).handoffs
        print(
            json.dumps(
                {
                    "round": round_,
                    "queued": counts.queued,
                    "completed": counts.completed,
                    "failed": counts.failed,
                    "skipped": counts.skipped,
                    "reasons": {str(reason): n for reason, n in counts.reasons.items()},
                }
            ),
            flush=True,
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_shared(%s, %s)", [gate, round_])


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
