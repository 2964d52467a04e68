"""Two scrapers sync overlapping references at the same instant: each payload of a
reference is handed off once, and a reference never has two ingestions queued.

Syncer A brings ref-000 … ref-059 and B ref-030 … ref-089, the overlap with the same
payloads, both released together at a starting gate; every round brings new payloads.
Rounds 0 and 2 start with the engine drained and queue one ingestion per reference;
rounds 1, 3 and 4 start with the previous round's ingestions still pending (and in round
4, round 3's handoffs waiting), so that each new handoff waits for its reference's
(``ingestion_job_already_active``).

Each syncer's scrape run is its own, so each handoff says which syncer opened it: the
syncers' counts are checked against that, reference by reference.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from django.db import connection

from ingest.runs.models import IngestRun, IngestSource
from ingest.scraping import services
from ingest.scraping.hashing import payload_hash
from ingest.scraping.models import HandoffStatus, IngestionHandoff
from jobs.clock import ManualClock
from jobs.models import Job
from jobs.notify import raw_connection
from jobs.testing import wait_until
from tests.support.base import tenant
from tests.support.drive import drain
from tests.support.handoff_syncer import payload, reference
from tests.support.ingest import builders

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

ROUNDS = 5
IDLE_ROUNDS = {0, 2}  # started with every ingestion done; the others behind pending ones
GATE = 0x686F66  # "hof": the advisory lock class of the starting gates
SYNCERS = {"A": (0, 59), "B": (30, 89)}  # each one's first and last reference
TOUCHED = [reference(n) for n in range(90)]
OVERLAP = [reference(n) for n in range(30, 60)]


def waiting_at_gate(round_: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = %s AND objid = %s AND NOT granted",
            [GATE, round_],
        )
        return cursor.fetchone()[0]


def test_two_scrapers_syncing_overlapping_references_hand_each_payload_off_once(processes, clock):
    # No hooks: the ingestion is not what is raced here, and a hook is a process per run.
    source = builders.source(tenant("Acme"), name="listings", kind="scraped_reference", config={}, hooks=())
    gates = raw_connection()  # holds every round's gate until both syncers wait at it
    for round_ in range(ROUNDS):
        gates.execute("SELECT pg_advisory_lock(%s, %s)", [GATE, round_])
    syncers = {
        name: processes.start(
            f"syncer-{name}",
            [
                "-m",
                "tests.support.handoff_syncer",
                name,
                str(source.pk),
                str(first),
                str(last),
                str(ROUNDS),
                str(GATE),
            ],
            stdout_pipe=True,
        )
        for name, (first, last) in SYNCERS.items()
    }
    overlap_won = []
    try:
        for round_ in range(ROUNDS):
            idle = round_ in IDLE_ROUNDS
            if idle and round_:
                drain_ingestions(source, clock, rounds_synced=round_)
            wait_until(lambda r=round_: waiting_at_gate(r) == 2, 60, "both syncers at the gate")
            gates.execute("SELECT pg_advisory_unlock(%s, %s)", [GATE, round_])
            results = {name: json.loads(syncer.read_line(30)) for name, syncer in syncers.items()}
            opened_by = check_round(source, round_, results, idle=idle)
            overlap_won.append(dict(Counter(opened_by[ref] for ref in OVERLAP)))
    finally:
        gates.close()
    for syncer in syncers.values():
        assert syncer.wait(30) == 0, syncer.tail()
    print(f"{ROUNDS} rounds; the overlap's handoffs opened by: {overlap_won}")


def drain_ingestions(source: IngestSource, clock: ManualClock, *, rounds_synced: int) -> None:
    """Run every ingestion, the waiting handoffs' too (each is queued when its reference's
    run ends): every payload synced so far is then ingested, once."""
    drain(clock)
    assert set(IngestionHandoff.objects.filter(source=source).values_list("status", flat=True)) == {
        HandoffStatus.COMPLETED
    }
    assert IngestRun.objects.filter(source=source).count() == rounds_synced * len(TOUCHED)


def check_round(source: IngestSource, round_: int, results: dict[str, dict], *, idle: bool) -> dict[str, str]:
    """Check a round's handoffs, each syncer's counts and the engine's jobs; which syncer
    opened each reference's handoff."""
    handoffs = list(
        IngestionHandoff.objects.filter(
            source=source, scrape_run__run_id__startswith=f"round-{round_}-"
        ).values_list("reference__external_id", "payload_hash", "scrape_run__run_id", "job_id")
    )
    # One handoff per (reference, payload) of the round, for every reference touched.
    assert sorted((ref, digest) for ref, digest, _, _ in handoffs) == [
        (ref, payload_hash(payload(n, round_))) for n, ref in enumerate(TOUCHED)
    ], results
    opened_by = {ref: run_id.rsplit("-", 1)[1] for ref, _, run_id, _ in handoffs}
    queued = [job_id is not None for _, _, _, job_id in handoffs]
    assert set(queued) == {idle}, (round_, results)

    # Each syncer counted the handoffs it opened as queued (or waiting, in a busy round)
    # and the other's as unchanged: each payload was handed off by one of them alone.
    for name, (first, last) in SYNCERS.items():
        mine = [reference(n) for n in range(first, last + 1)]
        opened = sum(opened_by[ref] == name for ref in mine)
        waiting = 0 if idle else opened
        reasons = {"payload_unchanged": len(mine) - opened, "ingestion_job_already_active": waiting}
        assert results[name] == {
            "round": round_,
            "queued": opened - waiting,
            "completed": 0,
            "failed": 0,
            "skipped": len(mine) - opened + waiting,
            "reasons": {reason: n for reason, n in reasons.items() if n},
        }, (name, results)
    assert sum(result["queued"] for result in results.values()) == sum(queued)

    # The jobs and the handoffs naming them match one to one; each reference has one
    # ingestion pending, never two.
    ingest_jobs = Job.objects.filter(type=services.INGEST_REFERENCE)
    assert dict(ingest_jobs.values_list("pk", "payload__handoff")) == dict(
        IngestionHandoff.objects.filter(job_id__isnull=False).values_list("job_id", "pk")
    )
    pending = Counter(
        IngestionHandoff.objects.filter(
            status=HandoffStatus.QUEUED,
            job_id__in=ingest_jobs.filter(state=Job.State.PENDING).values("pk"),
        ).values_list("reference__external_id", flat=True)
    )
    assert pending == dict.fromkeys(TOUCHED, 1), (round_, pending)
    return opened_by
