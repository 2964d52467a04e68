"""Handing back unstarted jobs is fenced: a job taken by a rescue and claimed again while
the hand-back waited stays with its new worker."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from jobs import engine
from jobs.models import Job
from jobs.notify import raw_connection
from tests.support.base import claim_one, make_job

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_on_a_lock() -> bool:
    probe = raw_connection()
    try:
        return bool(
            probe.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%%jobs_job%%' AND pid <> pg_backend_pid()"
            ).fetchone()
        )
    finally:
        probe.close()


def test_a_hand_back_that_waited_on_a_rescue_leaves_the_job_to_its_new_worker():
    job = make_job()
    claimed, batch = claim_one("w1")
    rival = raw_connection()
    rival.execute("BEGIN")
    rival.execute("SELECT id FROM jobs_job WHERE id = %s FOR UPDATE", [job.pk])
    released: dict[str, int] = {}

    def hand_back() -> None:
        try:
            released["n"] = engine.release([claimed], batch.token, worker="w1", started=[job.pk])
        finally:
            connection.close()

    thread = threading.Thread(target=hand_back)
    thread.start()
    try:
        for _ in range(200):
            if waiting_on_a_lock():
                break
            threading.Event().wait(0.025)
        else:
            pytest.fail("the hand-back never waited on the row")
        # Meanwhile the reaper rescued the job and w2 claimed and started it.
        rival.execute(
            "UPDATE jobs_job SET lease_token = gen_random_uuid(), attempts = 2 WHERE id = %s", [job.pk]
        )
        rival.execute("COMMIT")
    finally:
        thread.join(10)
        rival.close()

    assert released == {"n": 0}
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.RUNNING, 2)
    assert job.lease_token not in (None, batch.token)
