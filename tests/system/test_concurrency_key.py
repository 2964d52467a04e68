"""Two processes claim the same concurrency key at the same instant: one wins."""

from __future__ import annotations

import json
import uuid

import pytest
from django.db import connection

from jobs import engine
from jobs.models import Job
from jobs.notify import raw_connection
from jobs.testing import wait_until

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

ROUNDS = 12
GATE = 0x6B6579  # "key": the advisory lock class of the starting gates


def waiting_at_gate(round_: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = %s AND objid = %s AND NOT granted",
            [GATE, round_],
        )
        return cursor.fetchone()[0]


def test_two_processes_claiming_one_key_at_once_never_both_run(processes):
    key = f"report-{uuid.uuid4().hex[:8]}"
    gates = raw_connection()  # holds every round's gate until both claimers wait at it
    for round_ in range(ROUNDS):
        gates.execute("SELECT pg_advisory_lock(%s, %s)", [GATE, round_])
    claimers = [
        processes.start(
            f"claimer-{n}", ["-m", "tests.support.keyed_claimer", str(ROUNDS), str(GATE)], stdout_pipe=True
        )
        for n in range(2)
    ]
    decided_by_index = 0
    try:
        for round_ in range(ROUNDS):
            pair = {
                engine.enqueue("tests.keyed", {"round": round_}, concurrency_key=key).pk for _ in range(2)
            }
            wait_until(lambda r=round_: waiting_at_gate(r) == 2, 60, "both claimers at the gate")
            gates.execute("SELECT pg_advisory_unlock(%s, %s)", [GATE, round_])
            results = [json.loads(claimer.read_line(30)) for claimer in claimers]

            won = [pk for result in results for pk in result["won"]]
            assert len(won) == 1, (round_, results)
            running = Job.objects.filter(concurrency_key=key, state=Job.State.RUNNING)
            assert list(running.values_list("pk", flat=True)) == won
            assert (
                list(Job.objects.filter(concurrency_key=key, is_current=True).values_list("pk", flat=True))
                == won
            )
            decided_by_index += any(result["lost_at_index"] for result in results)

            winner = Job.objects.get(pk=won[0])
            token = uuid.UUID(next(r["token"] for r in results if r["won"]))
            engine.complete(winner, token)
            engine.cancel(Job.objects.get(pk=(pair - {winner.pk}).pop()))
    finally:
        gates.close()
    for claimer in claimers:
        assert claimer.wait(30) == 0, claimer.tail()
    # Both claimers take the head of the key; the row lock decides, and the unique index
    # stays the last line should both ever hold different jobs of the key
    # (tests/jobs/test_claim.py proves that one on its own).
    print(f"{ROUNDS} rounds: one winner each; {decided_by_index} decided by the unique index")
