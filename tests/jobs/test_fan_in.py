"""Fan-in: a job enqueued with ``after`` runs once every job it names has finished,
whatever their outcomes, and reads those outcomes; the claim statement, the claimable
queryset and the "why" line agree on what it waits for."""

from __future__ import annotations

import pytest

import jobs
from jobs import engine
from jobs.errors import InvalidArgument
from jobs.models import Dependency, Job
from jobs.testing import run_until_idle
from jobs.why import explain
from tests.support.base import claim_one, make_job, run_next, tenant

pytestmark = pytest.mark.django_db

State = Job.State


def finish(job: Job, outcome: str) -> None:
    """Run ``job`` to ``outcome`` through the engine: succeeded, failed or cancelled."""
    if outcome == "cancelled":
        engine.cancel(job, reason="test")
        return
    claimed, batch = claim_one(types=[job.type])
    assert claimed.pk == job.pk
    if outcome == "succeeded":
        engine.complete(claimed, batch.token)
    else:
        engine.fail(claimed, batch.token, "broken", permanent=True)


def claimable_ids() -> set[int]:
    return set(
        Job.objects.claimable(jobs.now(), ["tests.gather", "tests.noop"], []).values_list("id", flat=True)
    )


def test_a_fan_in_waits_for_every_job_it_names_then_reads_their_outcomes(clock):
    parts = [make_job(payload={"n": n}) for n in range(3)]
    gather = jobs.enqueue("tests.gather", after=parts)

    for part, outcome in zip(parts[:2], ("succeeded", "failed"), strict=True):
        finish(part, outcome)
        assert gather.pk not in claimable_ids()
    assert explain(gather) == f"waiting for 1 job(s) it fans in from to finish: {parts[2].pk}"

    finish(parts[2], "cancelled")
    assert gather.pk in claimable_ids()
    assert run_next() == "succeeded"
    gather.refresh_from_db()
    assert gather.result == {
        "seen": [
            [parts[0].pk, "succeeded", True],
            [parts[1].pk, "failed", False],
            [parts[2].pk, "cancelled", False],
        ]
    }


def test_the_claim_statement_passes_over_a_waiting_fan_in_and_takes_what_is_due(clock):
    part = make_job()
    gather = jobs.enqueue("tests.gather", after=[part.pk])

    claimed, _ = claim_one()
    assert claimed.pk == part.pk
    assert engine.claim("w2", limit=10).jobs == []
    assert gather.pk not in claimable_ids()


def test_a_fan_in_on_jobs_already_finished_runs_at_once(clock):
    part = make_job()
    finish(part, "succeeded")
    gather = jobs.enqueue("tests.gather", after=[part])

    assert run_until_idle() == 1
    gather.refresh_from_db()
    assert gather.state == State.SUCCEEDED


def test_enqueue_many_makes_every_new_job_wait_and_records_each_edge(clock):
    parts = [make_job(), make_job()]
    ids = jobs.enqueue_many("tests.gather", [{}, {}, {}], after=parts)

    assert Dependency.objects.count() == 6
    assert set(Dependency.objects.values_list("waiter", flat=True)) == set(ids)
    assert set(Job.objects.filter(waits=True).values_list("pk", flat=True)) == set(ids)
    assert claimable_ids() == {p.pk for p in parts}


def test_a_chained_child_can_fan_in_too(clock):
    part = make_job()
    parent = make_job("tests.noop")
    claimed, batch = claim_one(types=["tests.noop"])
    assert claimed.pk == part.pk  # the first job of the type: the part
    engine.complete(claimed, batch.token)
    claimed, batch = claim_one(types=["tests.noop"])
    engine.complete(
        claimed, batch.token, children=[engine.ChildSpec("tests.gather", {}, {"after": [part.pk]})]
    )

    child = Job.objects.get(type="tests.gather")
    assert child.parent_id == parent.pk
    assert list(Dependency.objects.values_list("waiter", "prerequisite")) == [(child.pk, part.pk)]


def test_a_key_that_returns_the_existing_job_adds_no_edge_to_it(clock):
    part = make_job()
    first = jobs.enqueue_once("tests.gather", pending_key="g", after=[part])
    again = jobs.enqueue_once("tests.gather", pending_key="g", after=[make_job()])

    assert first.created and not again.created
    assert list(Dependency.objects.values_list("prerequisite", flat=True)) == [part.pk]


def test_an_earlier_job_of_the_key_that_waits_does_not_hold_back_the_next(clock):
    part = make_job()
    waiting = jobs.enqueue("tests.gather", after=[part], concurrency_key="k")
    ready = jobs.enqueue("tests.gather", concurrency_key="k")

    assert claimable_ids() == {part.pk, ready.pk}
    claimed = engine.claim("w1", limit=10).jobs
    assert {job.pk for job in claimed} == {part.pk, ready.pk}
    assert waiting.pk not in {job.pk for job in claimed}


@pytest.mark.parametrize(
    ("after", "message"),
    [
        ("12", "after must be a list of jobs or their ids, got str '12'"),
        ([None], "after[0] must be a job or its id, got NoneType None"),
        ([True], "after[0] must be a job or its id, got bool True"),
        ([0], "after[0] 0 does not exist"),
        (list(range(1, 10_002)), "after names 10001 rows; at most 10000"),
    ],
)
def test_a_bad_after_is_refused_naming_it(after, message):
    with pytest.raises(InvalidArgument) as refused:
        jobs.enqueue("tests.gather", after=after)
    assert str(refused.value) == message
    assert not Job.objects.exists()


def test_a_job_that_does_not_exist_is_refused_and_nothing_is_written(clock):
    part = make_job()
    missing = part.pk + 1000

    with pytest.raises(InvalidArgument, match=f"after names job {missing}, which is no job"):
        jobs.enqueue("tests.gather", after=[part, missing])
    with pytest.raises(InvalidArgument, match=f"after names job {missing}"):
        jobs.enqueue_many("tests.gather", [{}, {}], after=[missing])
    assert list(Job.objects.values_list("pk", flat=True)) == [part.pk]
    assert not Dependency.objects.exists()


def test_a_tenant_job_may_wait_on_its_own_tenants_jobs_only(clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    theirs, platform, ours = make_job(tenant=globex), make_job(), make_job(tenant=acme)

    for other in (theirs, platform):
        with pytest.raises(InvalidArgument, match=f"job {other.pk}, which is no job of this tenant"):
            jobs.enqueue("tests.gather", after=[other], tenant=acme)
    jobs.enqueue("tests.gather", after=[ours], tenant=acme)
    jobs.enqueue("tests.gather", after=[theirs, platform, ours])  # a platform job: any
    assert Dependency.objects.count() == 4


def test_a_retried_prerequisite_holds_back_a_fan_in_that_has_not_started(clock):
    part = make_job()
    gather = jobs.enqueue("tests.gather", after=[part])
    finish(part, "failed")
    assert gather.pk in claimable_ids()

    engine.retry(Job.objects.get(pk=part.pk), reason="try again")
    assert gather.pk not in claimable_ids()
