"""Scrape syncs: what a sync of many references with their handoffs costs, end to end.

    .venv/bin/python bench/handoffs.py [--references 50000] [--json]

On a scratch database created (and dropped) on the project's server (the embedded
PostgreSQL, or ``DATABASE_URL``), through the API as the scraper calls it
(``POST /scraping/{source}/sync``, token-authenticated, JSON body, in process through
Django's test client: parsing, checks, hashing, the bulk statements, the response):

- a first sync of N new references: N references stored, N handoffs and N ingestion
  jobs queued;
- the same sync again: every payload unchanged, nothing queued;
- a sync where every tenth payload changed while the first ingestions are still queued:
  those wait for them (``ingestion_job_already_active``);
- the first sync again, of N new references of another source, sent as a scraper with
  a large run would: in ``--chunks`` concurrent syncs of one scrape run, one thread and
  database connection each (as one web process's worker threads would serve them).

Each row: wall time (of the requests, from the first sent to the last answered) and
references per second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--references", type=int, default=50_000)
    parser.add_argument(
        "--chunks", type=int, default=4, help="Concurrent syncs the last case splits the references into."
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    return parser.parse_args()


def payloads(count: int, version: int = 0) -> list[dict[str, Any]]:
    """Listing-like payloads of about 300 bytes; ``version`` changes every tenth."""
    return [
        {
            "external_id": f"listing-{n:07d}",
            "payload": {
                "title": f"Two-room flat near the station, number {n}",
                "price": 1000 + n % 977 + (version if n % 10 == 0 else 0),
                "currency": "EUR",
                "rooms": 2 + n % 3,
                "area_m2": 40 + n % 60,
                "url": f"https://listings.example/flat/{n}",
                "tags": ["balcony", "lift"] if n % 2 else ["garden"],
            },
        }
        for n in range(count)
    ]


def measure(client: Any, label: str, run_id: str, references: list[dict[str, Any]]) -> dict:
    body = json.dumps({"scrape_run_id": run_id, "references": references})
    started = time.perf_counter()
    answer = client.post("/scraping/listings/sync", body, content_type="application/json")
    wall = time.perf_counter() - started
    assert answer.status_code == 200, answer.content[:500]
    result = answer.json()
    return {
        "case": label,
        "references": len(references),
        "wall_s": wall,
        "per_s": len(references) / wall,
        "body_mb": len(body) / 1e6,
        "queued": result["handoff_queued_count"],
        "skipped": result["handoff_skipped_count"],
        "reasons": result["handoff_skipped_reasons"],
    }


def measure_chunks(token: str, source: str, references: list[dict[str, Any]], chunks: int) -> dict:
    """The references in ``chunks`` syncs of one scrape run, all sent at once."""
    from django.db import connections
    from django.test import Client

    bodies = [
        json.dumps({"scrape_run_id": "chunked", "references": references[k::chunks]}) for k in range(chunks)
    ]
    answers: list[Any] = [None] * chunks

    def send(k: int) -> None:
        try:
            answers[k] = Client(HTTP_AUTHORIZATION=f"Token {token}").post(
                f"/scraping/{source}/sync", bodies[k], content_type="application/json"
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(k,)) for k in range(chunks)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    assert all(answer.status_code == 200 for answer in answers), answers
    results = [answer.json() for answer in answers]
    return {
        "case": f"first sync in {chunks} concurrent chunks of one scrape run",
        "references": len(references),
        "wall_s": wall,
        "per_s": len(references) / wall,
        "body_mb": sum(len(body) for body in bodies) / 1e6,
        "queued": sum(r["handoff_queued_count"] for r in results),
        "skipped": sum(r["handoff_skipped_count"] for r in results),
        "reasons": {},
    }


def run(count: int, chunks: int) -> list[dict]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from ingest.runs.models import IngestSource
    from ingest.scraping.models import IngestionHandoff
    from tenancy.models import Membership, Tenant

    tenant = Tenant.objects.create(name="Bench", slug="bench")
    user = get_user_model().objects.create_user("scraper", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="ingest", codename="add_scrapereference")
    )
    Membership.objects.create(user=user, tenant=tenant)
    for name in ("listings", "chunked-listings"):
        IngestSource.objects.create(tenant=tenant, name=name, kind="scraped_reference", config={})
    token = Token.objects.create(user=user).key
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    rows = [
        measure(client, "first sync: all new", "run-1", payloads(count)),
        measure(client, "repeat: all unchanged", "run-2", payloads(count)),
        measure(
            client, "a tenth changed, first ingestions still queued", "run-3", payloads(count, version=1)
        ),
    ]
    handed_off = count + count // 10 + (1 if count % 10 else 0)
    assert IngestionHandoff.objects.count() == handed_off
    rows.append(measure_chunks(token, "chunked-listings", payloads(count), chunks))
    assert IngestionHandoff.objects.count() == handed_off + count
    return rows


def table(result: dict[str, Any]) -> str:
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"PostgreSQL {result['server']}",
        "",
        "| sync | references | body MB | wall s | references/s | queued | skipped |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['case']} | {row['references']:,} | {row['body_mb']:.1f} | "
            f"{row['wall_s']:.2f} | {row['per_s']:,.0f} | {row['queued']:,} | "
            f"{row['skipped']:,} |"
        )
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    from bench import setup_django
    from bench.engine import scratch_database

    setup_django("bench.settings")
    from django.test.utils import override_settings

    with scratch_database("bench_handoffs") as server:
        with override_settings(
            ALLOWED_HOSTS=["testserver"], INGEST_SCRAPE_MAX_REFERENCES=max(args.references, 50_000)
        ):
            result = {"server": server, "rows": run(args.references, args.chunks)}
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
