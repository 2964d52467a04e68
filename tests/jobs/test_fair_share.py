"""Claims are fair between tenants: a tenant whose jobs already run on its share of the
live workers waits behind every other tenant's due jobs, but still gets the workers
nobody else needs."""

from __future__ import annotations

import pytest

from jobs import engine
from jobs.models import Job, Worker
from tests.support.base import make_job, tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_workers(clock) -> None:
    for name in ("w1", "w2"):
        Worker.objects.create(
            name=name, hostname="h", pid=1, started_at=clock.now(), last_seen_at=clock.now()
        )


@pytest.fixture
def acme_busy_on_w2(two_workers):
    """Acme has one job running on w2 (half of the two workers) and more waiting, with a
    higher priority than anybody else's."""
    acme = tenant("Acme")
    make_job("tests.noop", tenant=acme)
    assert len(engine.claim("w2", limit=1).jobs) == 1
    return [make_job("tests.noop", tenant=acme, priority=5) for _ in range(3)]


def test_a_tenant_at_its_share_waits_behind_another_tenants_job(acme_busy_on_w2):
    theirs = make_job("tests.noop", tenant=tenant("Globex"))

    claimed = engine.claim("w1", limit=1).jobs

    assert [job.pk for job in claimed] == [theirs.pk]


def test_a_tenant_at_its_share_still_gets_a_worker_nobody_else_needs(acme_busy_on_w2):
    claimed = engine.claim("w1", limit=1).jobs

    assert [job.pk for job in claimed] == [acme_busy_on_w2[0].pk]


def test_a_batch_takes_the_other_tenants_jobs_first_then_fills_up(acme_busy_on_w2):
    theirs = make_job("tests.noop", tenant=tenant("Globex"))

    claimed = engine.claim("w1", limit=3).jobs

    assert {job.pk for job in claimed} == {theirs.pk, acme_busy_on_w2[0].pk, acme_busy_on_w2[1].pk}


def test_the_claimers_own_batch_does_not_count_against_the_tenant(two_workers):
    acme = tenant("Acme")
    make_job("tests.noop", tenant=acme)
    engine.claim("w1", limit=1)
    waiting = make_job("tests.noop", tenant=acme, priority=5)
    theirs = make_job("tests.noop", tenant=tenant("Globex"))

    # Acme runs on w1 only: for w1 itself, Acme holds no other worker.
    assert [job.pk for job in engine.claim("w1", limit=1).jobs] == [waiting.pk]
    # For w2, Acme holds one of the two workers: Globex goes first.
    assert [job.pk for job in engine.claim("w2", limit=1).jobs] == [theirs.pk]


def test_platform_jobs_are_never_held_back(two_workers):
    make_job("tests.noop")
    engine.claim("w2", limit=1)
    platform = make_job("tests.noop")
    make_job("tests.noop", tenant=tenant("Globex"))

    assert [job.pk for job in engine.claim("w1", limit=1).jobs] == [platform.pk]


def test_a_share_of_one_turns_fairness_off(acme_busy_on_w2, settings):
    settings.JOBS_TENANT_SHARE = 1
    make_job("tests.noop", tenant=tenant("Globex"))

    assert [job.pk for job in engine.claim("w1", limit=1).jobs] == [acme_busy_on_w2[0].pk]


def test_more_workers_give_each_tenant_more_of_them(clock, two_workers):
    for name in ("w3", "w4"):
        Worker.objects.create(
            name=name, hostname="h", pid=1, started_at=clock.now(), last_seen_at=clock.now()
        )
    acme = tenant("Acme")
    make_job("tests.noop", tenant=acme)
    engine.claim("w2", limit=1)
    waiting = make_job("tests.noop", tenant=acme, priority=5)
    make_job("tests.noop", tenant=tenant("Globex"))

    # Half of four workers is two: Acme on one of them is not crowded yet.
    assert [job.pk for job in engine.claim("w1", limit=1).jobs] == [waiting.pk]
    assert Job.objects.filter(tenant=acme, state=Job.State.RUNNING).count() == 2
