"""The pipeline's hand-written loaders (``ingest.runs.sql``) build the same instances,
related objects and all, as the ORM queries they stand for, and find nothing outside the
caller's tenant."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.forms.models import model_to_dict

from ingest.runs import services, sql
from ingest.runs.models import Hook, HookExecution, IngestBatch, IngestRun
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)


def _fields(instance) -> dict:
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


@pytest.fixture
def finished_run(clock, acme):
    source = builders.source(acme, batches=2, hooks=[builders.PASS, builders.PASS])
    run = services.start_ingest(source)
    drain(clock)
    return IngestRun.objects.get(pk=run.pk)


def test_a_run_for_fetching_is_the_orms_run_with_its_source_and_batch_state(finished_run, acme):
    loaded = sql.run_for_fetch(run=finished_run.pk, tenant=acme.pk, sequence=2)
    orm = IngestRun.objects.select_related("source").get(pk=finished_run.pk)
    assert _fields(loaded) == _fields(orm)
    assert _fields(loaded.source) == _fields(orm.source)
    assert loaded.batch_fetched is True
    assert loaded.previous_session == finished_run.batches.get(sequence=1).session_out
    third = sql.run_for_fetch(run=finished_run.pk, tenant=acme.pk, sequence=4)
    assert (third.batch_fetched, third.previous_session) == (False, None)  # no batch 3


def test_a_batch_with_its_hooks_is_the_orms_in_order_sharing_one_batch(finished_run, acme):
    batch = finished_run.batches.get(sequence=2)
    loaded, executions = sql.batch_with_hooks(batch=batch.pk, run=finished_run.pk, tenant=acme.pk)
    orm = IngestBatch.objects.select_related("run__source", "run__tenant").get(pk=batch.pk)
    assert _fields(loaded) == _fields(orm)
    assert _fields(loaded.run) == _fields(orm.run)
    assert _fields(loaded.run.source) == _fields(orm.run.source)
    assert _fields(loaded.run.tenant) == _fields(orm.run.tenant)
    expected = list(
        HookExecution.objects.filter(batch=batch).select_related("hook__template").order_by("position")
    )
    assert [_fields(e) for e in executions] == [_fields(e) for e in expected]
    assert [_fields(e.hook) for e in executions] == [_fields(e.hook) for e in expected]
    assert [_fields(e.hook.template) for e in executions] == [_fields(e.hook.template) for e in expected]
    assert [e.hook.template.offered for e in executions] == [True, True]
    assert all(e.batch is loaded for e in executions)
    assert model_to_dict(loaded) == model_to_dict(orm)


def test_an_entry_is_offered_only_to_the_tenants_it_names(finished_run, acme, globex):
    batch = finished_run.batches.get(sequence=1)
    first, second = (hook.template for hook in finished_run.source.hooks.order_by("position"))
    first.tenants.set([globex])
    second.tenants.set([globex, acme])
    _, executions = sql.batch_with_hooks(batch=batch.pk, run=finished_run.pk, tenant=acme.pk)
    assert [e.hook.template.offered for e in executions] == [False, True]
    second.tenants.clear()  # none named: every tenant
    _, executions = sql.batch_with_hooks(batch=batch.pk, run=finished_run.pk, tenant=acme.pk)
    assert [e.hook.template.offered for e in executions] == [False, True]


def test_a_batch_whose_hook_was_removed_or_that_has_none_still_loads(finished_run, acme):
    batch = finished_run.batches.get(sequence=1)
    Hook.objects.filter(source=finished_run.source, position=0).delete()
    _, executions = sql.batch_with_hooks(batch=batch.pk, run=finished_run.pk, tenant=acme.pk)
    assert [e.hook is None for e in executions] == [True, False]
    HookExecution.objects.filter(batch=batch).delete()
    loaded, executions = sql.batch_with_hooks(batch=batch.pk, run=finished_run.pk, tenant=acme.pk)
    assert (loaded.pk, executions) == (batch.pk, [])


def test_a_batch_to_publish_is_locked_with_its_run(finished_run, acme):
    batch = finished_run.batches.get(sequence=1)
    with transaction.atomic():
        loaded = sql.batch_to_publish(batch=batch.pk, run=finished_run.pk, tenant=acme.pk)
        assert _fields(loaded) == _fields(batch)
        assert _fields(loaded.run.source) == _fields(finished_run.source)
        assert _locked_relations() >= {"ingest_ingestbatch", "ingest_ingestrun"}


def _locked_relations() -> set[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = pg_backend_pid() AND l.mode = 'RowShareLock'"
        )
        return {row[0] for row in cursor.fetchall()}


def test_nothing_is_found_through_another_tenant_or_run(finished_run, acme, globex):
    batch = finished_run.batches.get(sequence=1)
    assert sql.run_for_fetch(run=finished_run.pk, tenant=globex.pk, sequence=1) is None
    assert sql.run_for_fetch(run=finished_run.pk, tenant=None, sequence=1) is None
    assert sql.batch_with_hooks(batch=batch.pk, run=finished_run.pk, tenant=globex.pk) == (None, [])
    assert sql.batch_with_hooks(batch=batch.pk, run=finished_run.pk + 1, tenant=acme.pk) == (None, [])
    assert sql.batch_to_publish(batch=batch.pk, run=finished_run.pk, tenant=globex.pk) is None


def test_a_recorded_batch_and_its_executions_hold_what_the_orm_would_have_written(acme, clock):
    source = builders.source(acme, hooks=[builders.PASS, builders.PASS, builders.PASS])
    Hook.objects.filter(source=source, position=0).update(position=7)  # hooks go by position
    run = services.start_ingest(source)
    with transaction.atomic():
        batch = sql.record_batch(
            run=run.pk,
            sequence=1,
            records=2,
            session_in={},
            session_out={"next": 2},
            has_more=True,
            location="staged-1",
            fetch_ms=3,
            now=clock.now(),
        )
    stored = IngestBatch.objects.get(pk=batch.pk)
    assert _fields(batch) == _fields(stored)
    expected = IngestBatch(
        run=run,
        sequence=1,
        records=2,
        session_out={"next": 2},
        has_more=True,
        location="staged-1",
        fetch_ms=3,
        fetched_at=clock.now(),
    )
    assert {**_fields(expected), "id": stored.pk} == _fields(stored)
    hooks = list(source.hooks.order_by("position"))
    executions = list(HookExecution.objects.filter(batch=batch).order_by("position"))
    assert [_fields(e) for e in executions] == [
        {
            **_fields(HookExecution(batch=stored, hook=hook, hook_name=hook.name, position=n, tenant=acme)),
            "id": executions[n].pk,
        }
        for n, hook in enumerate(hooks)
    ]
    run.refresh_from_db()
    assert (run.batches_ingested, run.ingest_done) == (1, False)

    with transaction.atomic():
        again = sql.record_batch(
            run=run.pk,
            sequence=1,
            records=2,
            session_in={},
            session_out={},
            has_more=False,
            location="staged-2",
            fetch_ms=3,
            now=clock.now(),
        )
    assert again is None  # the batch exists: nothing written
    run.refresh_from_db()
    assert (run.batches_ingested, run.ingest_done) == (1, False)
