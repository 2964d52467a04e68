"""``ctx.batch()``: a handler that commits its own batches commits each only while its
attempt holds the job's lease; once the lease is taken from it, the batch in flight rolls
back and the attempt stops, so two attempts never write side by side."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from jobs import engine
from jobs.context import JobContext
from jobs.errors import LeaseLost
from jobs.models import Job
from jobs.testing import frozen_clock
from tests.support.base import claim_one, hit_count, make_job, run_next

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_batch_commits_while_the_lease_holds(hits_table):
    job = make_job("tests.fenced_batches", {"batches": 3})

    assert run_next() == "succeeded"
    assert hit_count() == 3
    job.refresh_from_db()
    assert job.result == 3


def test_a_batch_whose_lease_was_taken_rolls_back_and_the_attempt_stops(hits_table):
    job = make_job("tests.fenced_batches", {"batches": 3, "rescue_before": 1})

    run_next()

    assert hit_count() == 1  # the first batch only: the second saw its lease gone
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING  # the outcome is the new lease holder's to write
    assert "lease_lost" in job.events.values_list("kind", flat=True)


def test_hold_lease_refuses_a_job_that_no_longer_runs(hits_table):
    job = make_job("tests.fenced_batches")

    with pytest.raises(LeaseLost, match=f"job {job.pk}: lease None is no longer current"):
        JobContext(job, frozen_clock()).hold_lease()


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@pytest.mark.parametrize(("relaxed", "at_commit"), [(True, "off"), (False, "on")])
def test_a_relaxed_batch_commits_without_waiting_for_the_disk_and_only_that_batch(
    hits_table, relaxed, at_commit
):
    make_job("tests.fenced_batches")
    job, _ = claim_one()

    with transaction.atomic():
        engine.hold_lease(job, relaxed=relaxed)  # what ctx.batch() runs last
        assert _synchronous_commit() == at_commit
    assert _synchronous_commit() == "on"
