"""The claim's condition is written twice: as SQL in the claim statement
(``jobs.sql._CLAIMABLE``) and as ``JobQuerySet.claimable()``, which keyed claims, the
dashboard and the "why" explanations use. Were they to drift, a worker would claim jobs
the rest of the system calls blocked (or pass over jobs it calls due), and a keyed
claim would drop the jobs the claim statement picked. Hypothesis builds small job tables
(parents in every state, jobs waiting on others in every state, concurrency keys with
running and pending holders in and out of their key scope, run_after either side of now,
known and unknown types, served and unserved queues) and both must select exactly the
same jobs from each.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase

from jobs import sql
from jobs.models import Dependency, Job
from jobs.testing import T0
from tenancy.models import Tenant
from tests.support.base import tenant

NOW = T0
# Few values of each, so that jobs often share a queue, a type or a key.
QUEUES = ("a", "b")
TYPES = ("t1", "t2")
KEYS = (None, "k")
# Pending first, and thrice: most of the condition is about pending jobs, and a failing
# table shrinks towards them.
STATES = ("pending", "pending", "pending", "running", "succeeded", "failed", "cancelled")
RUN_AFTER = (-60, 0, 60)  # seconds from now: due, due exactly now, not yet due


@st.composite
def tables(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to eight jobs; ``parent`` is the index of another (or the same) row, ``after``
    the indexes of the rows it waits on."""
    count = draw(st.integers(1, 8))
    return [
        {
            "state": draw(st.sampled_from(STATES)),
            "queue": draw(st.sampled_from(QUEUES)),
            "type": draw(st.sampled_from(TYPES)),
            "run_after": draw(st.sampled_from(RUN_AFTER)),
            # One job in four has a parent: most parents have not succeeded, so more would
            # leave little else to tell the two apart.
            "parent": draw(st.integers(0, count - 1)) if draw(st.integers(0, 3)) == 3 else None,
            # One job in four fans in from up to three others (never itself).
            "after": (
                draw(st.sets(st.integers(0, count - 1), min_size=1, max_size=3))
                if draw(st.integers(0, 3)) == 3
                else set()
            ),
            "concurrency_key": draw(st.sampled_from(KEYS)),
            # A tenant's job keys in the tenant's scope, unless its handler declares its keys
            # global (scope 0, the platform's, like a job without a tenant).
            "tenant": draw(st.booleans()),
            "global_keys": draw(st.booleans()),
        }
        for _ in range(count)
    ]


def build(rows: list[dict[str, Any]], owner: Tenant) -> None:
    """Write the rows as jobs 1..n (ids in row order: "earlier" is the row order)."""
    jobs = []
    for pk, row in enumerate(rows, start=1):
        job = Job(
            id=pk,
            type=row["type"],
            queue=row["queue"],
            state=row["state"],
            created_at=NOW,
            run_after=NOW + timedelta(seconds=row["run_after"]),
            parent_id=None if row["parent"] is None else row["parent"] + 1,
            concurrency_key=row["concurrency_key"],
            tenant=owner if row["tenant"] else None,
            waits=bool(set(row.get("after", ())) - {pk - 1}),
            key_scope=owner.pk if row["tenant"] and not row["global_keys"] else 0,
        )
        if job.state == Job.State.RUNNING:
            job.locked_by, job.locked_at, job.lease_token = "w1", NOW, uuid.uuid4()
            job.lease_expires_at = NOW + timedelta(seconds=60)
        elif job.state in Job.FINISHED:
            job.finished_at = NOW
        jobs.append(job)
    Job.objects.bulk_create(jobs)
    Dependency.objects.bulk_create(
        Dependency(waiter_id=pk, prerequisite_id=index + 1)
        for pk, row in enumerate(rows, start=1)
        for index in row.get("after", ())
        if index + 1 != pk
    )


# Each worker's view of a table: every type known, or only the first; every queue named,
# only the first, or none (meaning every queue, to both: the claim then serves the queues
# that have pending jobs). The tables draw types and queues at random, so the first stands
# for any one. Checking each view costs two queries where another table costs an insert,
# and catches a difference that only one of them shows.
WORKERS = [
    (types, queues) for types in (list(TYPES), [TYPES[0]]) for queues in (list(QUEUES), [QUEUES[0]], [])
]


def job(**overrides: Any) -> dict[str, Any]:
    """A pending, due, keyed platform job of the first type and queue, but for ``overrides``."""
    return {
        "state": "pending",
        "queue": "a",
        "type": "t1",
        "run_after": -60,
        "parent": None,
        "after": set(),
        "concurrency_key": "k",
        "tenant": False,
        "global_keys": False,
        **overrides,
    }


# The rarest differences random tables reach: an earlier job of the same key that does
# not count as ahead (another type, a parent not done, waiting on an unfinished job, not
# yet due, another key scope), and one that does. Pinned, so that every run checks them.
EARLIER_OF_THE_KEY = [
    [job(type="t2"), job()],
    [job(state="failed", concurrency_key=None), job(parent=0), job()],
    [job(state="running", concurrency_key=None), job(after={0}), job()],
    [job(run_after=60), job()],
    [job(tenant=True), job()],
    [job(), job()],
]


class TestClaimableAgrees(TestCase):
    """Each example runs in its own transaction, rolled back after it."""

    @classmethod
    def setUpTestData(cls) -> None:
        cls.acme = tenant("Acme")

    @settings(max_examples=200, deadline=None)
    @given(rows=tables())
    @example(rows=EARLIER_OF_THE_KEY[0])
    @example(rows=EARLIER_OF_THE_KEY[1])
    @example(rows=EARLIER_OF_THE_KEY[2])
    @example(rows=EARLIER_OF_THE_KEY[3])
    @example(rows=EARLIER_OF_THE_KEY[4])
    @example(rows=EARLIER_OF_THE_KEY[5])
    def test_sql_and_queryset_select_the_same_jobs(self, rows: list[dict[str, Any]]) -> None:
        build(rows, self.acme)
        most = 0
        for types, queues in WORKERS:
            params = {"now": NOW, "types": types, "queues": queues}
            raw = [
                row[0] for row in sql.execute(sql.claimable_ids(named_queues=bool(queues)), params).fetchall()
            ]
            assert len(raw) == len(set(raw)), "a job matched more than one served queue"
            orm = set(Job.objects.claimable(NOW, types, queues).values_list("id", flat=True))
            assert set(raw) == orm, f"types {types}, queues {queues or 'all'}"
            most = max(most, len(orm))
        # Shown by --hypothesis-show-statistics: how many tables had something to claim.
        event(f"most claimable jobs: {min(most, 3)}{'+' if most >= 3 else ''}")
