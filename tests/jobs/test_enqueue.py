from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from jobs import engine
from jobs.errors import InvalidPayload, UnknownJobType
from jobs.models import Job
from tests.support.base import make_job

pytestmark = pytest.mark.django_db


def test_it_stores_a_pending_job_with_the_handlers_defaults(clock):
    job = make_job("tests.flaky", {"succeed_on": 2})

    assert job.state == Job.State.PENDING
    assert job.queue == "default"
    assert job.max_attempts == 4  # from @jobs.handler("tests.flaky", max_attempts=4)
    assert job.run_after == job.created_at == clock.now()
    assert job.pipeline_id is not None


def test_an_unknown_type_is_refused_and_nothing_is_written():
    with pytest.raises(UnknownJobType, match="tests.nope"):
        engine.enqueue("tests.nope", {})
    assert not Job.objects.exists()


@pytest.mark.parametrize("payload", [[1, 2], "text", {"when": object()}])
def test_a_malformed_payload_is_refused_and_nothing_is_written(payload):
    with pytest.raises(InvalidPayload):
        engine.enqueue("tests.noop", payload)
    assert not Job.objects.exists()


def test_a_unique_key_makes_enqueue_idempotent_while_the_job_is_unfinished(clock):
    first = make_job("tests.noop", unique_key="sync:units:2026")
    again = make_job("tests.noop", unique_key="sync:units:2026")
    assert again.pk == first.pk
    assert Job.objects.count() == 1

    Job.objects.filter(pk=first.pk).update(state=Job.State.SUCCEEDED, finished_at=clock.now())
    later = make_job("tests.noop", unique_key="sync:units:2026")
    assert later.pk != first.pk


def test_enqueue_many_inserts_in_one_statement(django_assert_num_queries):
    payloads = [{"n": n} for n in range(2_000)]
    with django_assert_num_queries(2):  # the INSERT and the NOTIFY
        ids = engine.enqueue_many("tests.noop", payloads)
    assert len(ids) == 2_000
    assert Job.objects.filter(state=Job.State.PENDING).count() == 2_000
    stored = dict(Job.objects.filter(pk__in=ids).values_list("pk", "payload"))
    assert [stored[pk]["n"] for pk in ids] == list(range(2_000))  # the payloads' order


def test_enqueue_many_skips_payloads_whose_unique_key_is_taken():
    make_job("tests.noop", unique_key="k1")
    ids = engine.enqueue_many("tests.noop", [{}, {}, {}], unique_keys=["k1", "k2", None])
    assert len(ids) == 2


def test_a_rolled_back_caller_enqueues_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        make_job("tests.noop")
        raise RuntimeError("caller failed")
    assert not Job.objects.exists()


def test_a_future_run_after_is_kept(clock):
    later = clock.now() + timedelta(hours=1)
    job = make_job("tests.noop", run_after=later)
    assert job.run_after == later
    assert engine.claim("w", limit=5).jobs == []


def test_unique_keys_are_per_tenant():
    from tests.support.base import tenant

    acme, globex = tenant("Acme"), tenant("Globex")
    a = make_job("tests.noop", unique_key="nightly", tenant=acme)
    b = make_job("tests.noop", unique_key="nightly", tenant=globex)
    platform = make_job("tests.noop", unique_key="nightly")
    assert len({a.pk, b.pk, platform.pk}) == 3
    assert make_job("tests.noop", unique_key="nightly", tenant=globex).pk == b.pk
    assert make_job("tests.noop", unique_key="nightly").pk == platform.pk
