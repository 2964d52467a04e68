from __future__ import annotations

from datetime import timedelta

import pytest

from jobs import engine
from jobs.models import Job, Worker
from jobs.why import error_line, explain
from tests.support.base import claim_one, make_job, run_next, tenant

pytestmark = pytest.mark.django_db


def live_worker(clock, queues=(), name="w1"):
    Worker.objects.create(
        name=name, hostname="h", pid=1, queues=list(queues), started_at=clock.now(), last_seen_at=clock.now()
    )


def running_on(clock, worker: str) -> Job:
    job = make_job("tests.noop")
    claim_one(worker)
    job.refresh_from_db()
    return job


def test_it_says_when_a_job_waits_for_its_backoff(clock):
    job = make_job("tests.flaky")
    run_next()
    job.refresh_from_db()
    assert explain(job).startswith("waiting for run_after (retry backoff): due in 1")
    assert explain(job).endswith("; the last attempt failed: TransientError: flaky attempt 1")


def test_a_failed_job_says_what_went_wrong():
    job = make_job("tests.noop")
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.FAILED,
        error_kind=Job.ErrorKind.PERMANENT,
        finished_at=job.created_at,
        last_error="KeyError: 'module'\n  File \"handlers.py\", line 3, in run\n",
    )
    job.refresh_from_db()
    assert explain(job) == "failed (Permanent): KeyError: 'module'; retry it to run again"


@pytest.mark.parametrize(
    ("error", "line"),
    [
        ("", ""),
        ("ValueError: bad row\nTraceback (most recent call last):\n  ...", "ValueError: bad row"),
        ("Traceback (most recent call last):\n  File x\nOSError: disk full\n", "OSError: disk full"),
        ("x" * 300, "x" * 199 + "…"),
    ],
)
def test_the_error_line_is_what_went_wrong(error, line):
    assert error_line(error) == line


def test_it_says_when_a_job_is_snoozed(clock):
    job = make_job("tests.poll", {"ready_at": (clock.now() + timedelta(hours=1)).isoformat()})
    run_next()
    job.refresh_from_db()
    assert "(snoozed)" in explain(job)


def test_it_names_the_parent_a_job_waits_on(clock):
    parent = make_job("tests.noop")
    child = make_job("tests.noop", parent=parent)
    assert explain(child) == f"waiting on its parent job {parent.pk} (pending)"


def test_it_names_the_job_holding_the_concurrency_key(clock):
    live_worker(clock)
    holder = make_job("tests.keyed", concurrency_key="module:1")
    waiting = make_job("tests.keyed", concurrency_key="module:1")
    claim_one()
    assert explain(waiting) == f"its concurrency key 'module:1' is held by job {holder.pk}"


def test_it_says_when_the_handler_is_not_registered(clock):
    job = make_job("tests.noop")
    Job.objects.filter(pk=job.pk).update(type="gone.handler")
    job.refresh_from_db()
    assert explain(job) == "its handler 'gone.handler' is not registered in this deployment"


def test_it_says_when_no_live_worker_serves_the_queue(clock):
    live_worker(clock, queues=["bulk"])
    job = make_job("tests.noop", queue="default")
    assert explain(job).startswith("no live worker serves queue 'default'")


def test_a_due_job_with_a_worker_waits_its_turn(clock):
    live_worker(clock)
    make_job("tests.noop")
    job = make_job("tests.noop")
    assert explain(job).startswith("due; 1 job(s) ahead of it in queue 'default'")


def test_it_describes_running_and_finished_jobs(clock):
    live_worker(clock, name="host:9")
    job = running_on(clock, "host:9")
    assert explain(job) == "running on host:9 (attempt 1 of 3)"
    engine.cancel(job)
    job.refresh_from_db()
    assert explain(job).startswith("cancelled")


def test_an_expired_lease_with_a_live_worker_is_left_to_its_reaper(clock):
    job = running_on(clock, "host:9")
    clock.advance(60)
    live_worker(clock, name="host:10")

    assert explain(job) == (
        f"running on host:9, but its lease expired at "
        f"{job.lease_expires_at:%H:%M:%S}; the reaper of a live worker "
        f"rescues it between that worker's batches, or recover it now with "
        f"the admin's Recover action or POST /api/jobs/{job.pk}/recover/"
    )


def test_an_expired_lease_with_no_live_worker_says_nothing_will_rescue_it_and_what_would(clock):
    live_worker(clock, name="host:9")
    job = running_on(clock, "host:9")
    clock.advance(60)  # the whole cluster died with it

    why = explain(job)

    assert "the reaper will" not in why and "live worker's reaper" not in why
    assert why == (
        f"running on host:9, but its lease expired at {job.lease_expires_at:%H:%M:%S} "
        f"and no worker is alive to rescue it: starting the cluster (manage.py "
        f"qcluster) will, as will manage.py jobs_recover_stale; or recover it with "
        f"the admin's Recover action or POST /api/jobs/{job.pk}/recover/"
    )


def test_a_live_lease_of_a_worker_that_is_gone_says_who_rescues_it_when(clock):
    job = running_on(clock, "host:9")  # its worker's row is gone (stopped, or reaped)
    live_worker(clock, name="host:10")

    assert explain(job) == (
        f"running on host:9, but that worker is no longer registered; once "
        f"its lease ends at {job.lease_expires_at:%H:%M:%S}, a live worker's "
        f"reaper will rescue it, or recover it now with the admin's Recover "
        f"action or POST /api/jobs/{job.pk}/recover/"
    )


def test_a_live_lease_of_a_stale_worker_with_none_alive_says_nothing_will_rescue_it(clock, settings):
    settings.JOBS_LEASE_SECONDS = 600  # a long lease outlives its worker's heartbeat
    live_worker(clock, name="host:9")
    job = running_on(clock, "host:9")
    clock.advance(120)

    why = explain(job)

    assert why.startswith(
        f"running on host:9, but that worker was last seen at "
        f"{job.locked_at:%H:%M:%S} and no worker is alive: once its lease ends "
        f"at {job.lease_expires_at:%H:%M:%S}, starting the cluster (manage.py "
        f"qcluster) or manage.py jobs_recover_stale will rescue it"
    )
    assert why.endswith(
        f"or recover it now with the admin's Recover action or POST /api/jobs/{job.pk}/recover/"
    )


def test_another_tenants_job_with_the_same_key_neither_blocks_nor_is_named(clock):
    live_worker(clock)
    acme, globex = tenant("Acme"), tenant("Globex")
    theirs = make_job("tests.keyed", concurrency_key="imports", tenant=globex)
    ours = make_job("tests.keyed", concurrency_key="imports", tenant=acme)
    engine.claim("w9", limit=1)

    ours.refresh_from_db()
    assert Job.objects.get(pk=theirs.pk).state == Job.State.RUNNING
    assert explain(ours).startswith("due; 0 of its tenant's job(s) ahead")
    assert engine.claim("w2", limit=5).jobs == [ours]  # its key is free in its own tenant


def test_a_global_key_is_held_across_tenants_without_naming_the_holder(clock):
    live_worker(clock)
    acme, globex = tenant("Acme"), tenant("Globex")
    theirs = make_job("tests.global_keyed", concurrency_key="registry-api", tenant=globex)
    ours = make_job("tests.global_keyed", concurrency_key="registry-api", tenant=acme)
    engine.claim("w9", limit=1)

    assert engine.claim("w2", limit=5).jobs == []
    assert Job.objects.get(pk=theirs.pk).state == Job.State.RUNNING
    assert explain(ours) == "its concurrency key 'registry-api' is held by another tenant's job"


def test_only_the_tenants_own_jobs_are_counted_ahead(clock):
    live_worker(clock)
    acme, globex = tenant("Acme"), tenant("Globex")
    for _ in range(3):
        make_job("tests.noop", tenant=globex)
    make_job("tests.noop", tenant=acme)
    job = make_job("tests.noop", tenant=acme)

    assert explain(job).startswith("due; 1 of its tenant's job(s) ahead of it in queue 'default'")


def test_it_names_the_job_of_the_same_key_that_goes_first(clock):
    live_worker(clock)
    first = make_job("tests.keyed", concurrency_key="module:1")
    second = make_job("tests.keyed", concurrency_key="module:1")

    assert explain(second) == (
        f"jobs of its concurrency key 'module:1' run in the order they came: job {first.pk} goes first"
    )
