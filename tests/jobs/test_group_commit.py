"""Fast atomic jobs of one batch share a commit (EngineWorker._run_group) without
losing any of a single job's guarantees."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import jobs
from jobs import engine, registry
from jobs.models import Job, JobEvent
from jobs.worker import EngineWorker
from tests.support.base import hit_count, row_locked

pytestmark = pytest.mark.django_db(transaction=True)

committed: list[int] = []


@pytest.fixture(autouse=True)
def group_write(settings):
    """``tests.group_write``: inserts a hit, schedules an on-commit note, maybe fails."""
    settings.JOBS_GROUP_FAST_JOB_SECONDS = 1.0  # "fast" even on a crowded test machine

    @jobs.handler("tests.group_write", max_attempts=1)
    def group_write(ctx: jobs.JobContext) -> int:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, 0)", [ctx.job.pk])
        transaction.on_commit(lambda: committed.append(ctx.job.pk))
        if ctx.payload.get("fail"):
            raise jobs.PermanentError("failed after writing")
        return ctx.job.pk

    committed.clear()
    yield
    registry.unregister("tests.group_write")


def warmed_worker() -> EngineWorker:
    """A worker that has seen the type run fast, so that it groups the next ones."""
    worker = EngineWorker(name="grouper", batch_size=10)
    engine.enqueue("tests.group_write", {})
    assert worker.run_once() == 1
    committed.clear()
    return worker


def test_a_failing_job_in_a_group_rolls_back_only_its_own_writes(hits_table):
    worker = warmed_worker()
    ids = engine.enqueue_many("tests.group_write", [{}, {"fail": True}, {}])

    assert worker.run_once() == 3

    states = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
    assert states == {ids[0]: "succeeded", ids[1]: "failed", ids[2]: "succeeded"}
    with connection.cursor() as cursor:
        cursor.execute("SELECT job_id FROM tests_hits WHERE job_id = ANY(%s)", [ids])
        assert sorted(row[0] for row in cursor.fetchall()) == [ids[0], ids[2]]
    assert sorted(committed) == [ids[0], ids[2]]  # the failed job's callback was dropped
    assert Job.objects.get(pk=ids[0]).result == ids[0]


def test_each_success_has_its_history_row_and_finish_time(hits_table):
    worker = warmed_worker()
    ids = engine.enqueue_many("tests.group_write", [{}] * 5)

    assert worker.run_once() == 5

    for job in Job.objects.filter(pk__in=ids):
        assert job.state == Job.State.SUCCEEDED
        assert job.lease_token is None and job.finished_at is not None
        kinds = list(job.events.values_list("kind", flat=True))
        assert kinds == [JobEvent.Kind.CLAIMED, JobEvent.Kind.SUCCEEDED]
    assert hit_count() == 6


def test_a_job_cancelled_after_the_claim_does_not_run_inside_the_group(hits_table):
    worker = warmed_worker()
    ids = engine.enqueue_many("tests.group_write", [{}, {}, {}])
    batch = engine.claim(worker.name, limit=10)
    engine.cancel(Job.objects.get(pk=ids[1]))

    for job in batch.jobs:
        worker._held.add(job.pk)
    assert worker._run_group(batch.jobs, batch.token) == 3

    states = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
    assert states == {ids[0]: "succeeded", ids[1]: "cancelled", ids[2]: "succeeded"}
    assert dict(Job.objects.filter(pk__in=ids).values_list("pk", "attempts")) == {
        ids[0]: 1,
        ids[1]: 0,
        ids[2]: 1,
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM tests_hits WHERE job_id = %s", [ids[1]])
        assert cursor.fetchone()[0] == 0


def test_a_group_passes_over_a_row_another_session_holds_and_starts_it_after_itself(hits_table):
    """A claim that saw a just-claimed row still pending locks it on its way past and
    keeps the lock until it commits; the group does not wait for it."""
    worker = warmed_worker()
    ids = engine.enqueue_many("tests.group_write", [{}] * 4)
    batch = engine.claim(worker.name, limit=10)
    for job in batch.jobs:
        worker._held.add(job.pk)
    rest = list(batch.jobs)

    with row_locked(Job.objects.get(pk=ids[1])):
        assert worker._run_group(rest, batch.token) == 3
        assert [job.pk for job in rest] == [ids[0], ids[2], ids[3], ids[1]]
        assert dict(Job.objects.filter(pk__in=ids).values_list("pk", "attempts")) == {
            ids[0]: 1,
            ids[1]: 0,  # not counted: it did not start
            ids[2]: 1,
            ids[3]: 1,
        }

    assert worker._run_group(rest[3:], batch.token) == 1
    assert set(Job.objects.filter(pk__in=ids).values_list("state", "attempts")) == {("succeeded", 1)}


def test_a_start_that_skips_locked_rows_names_them_and_leaves_out_those_taken_away(clock):
    held, gone, free = (engine.enqueue("tests.noop", {}) for _ in range(3))
    batch = engine.claim("w", limit=10)
    engine.cancel(gone)

    with row_locked(held):
        started, busy = engine.start_unless_locked(batch.jobs, batch.token)

    assert (started, busy) == ({free.pk}, {held.pk})
    assert dict(Job.objects.values_list("pk", "attempts")) == {held.pk: 0, gone.pk: 0, free.pk: 1}


def test_a_heartbeat_skips_rows_an_open_group_holds_instead_of_waiting():
    job = engine.enqueue("tests.noop", {})
    batch = engine.claim("w", limit=1)
    with row_locked(job):
        assert engine.heartbeat(batch.token, [job.pk]) == 0
    assert engine.heartbeat(batch.token, [job.pk]) == 1


def test_jobs_a_group_closes_before_reaching_keep_their_attempts(hits_table, settings):
    worker = warmed_worker()
    settings.JOBS_GROUP_COMMIT_SECONDS = 1e-9  # the group closes after its first job
    ids = engine.enqueue_many("tests.group_write", [{}] * 5)
    batch = engine.claim(worker.name, limit=10)
    for job in batch.jobs:
        worker._held.add(job.pk)

    assert worker._run_group(batch.jobs, batch.token) == 1

    # Committed with the group: a worker dying now has spent nothing for the other four.
    assert dict(Job.objects.filter(pk__in=ids).values_list("pk", "attempts")) == {
        ids[0]: 1,
        **{pk: 0 for pk in ids[1:]},
    }
    assert worker._started == {ids[0]}
    assert worker._run_group(batch.jobs[1:], batch.token) == 1  # counted again as it starts
    assert Job.objects.get(pk=ids[1]).attempts == 1


def test_a_grouped_handler_has_half_the_lease_before_it_is_interrupted(hits_table, settings):
    settings.JOBS_LEASE_SECONDS = 6
    seen: list[float] = []
    worker = warmed_worker()
    real = worker._time_limits.call

    def call(func, *, seconds, job_id):
        seen.append(seconds)
        return real(func, seconds=seconds, job_id=job_id)

    worker._time_limits.call = call
    engine.enqueue_many("tests.group_write", [{}] * 3)
    assert worker.run_once() == 3
    assert seen == [3.0, 3.0, 3.0]


def test_a_grouped_job_that_sends_no_statement_costs_no_savepoint(hits_table):
    """The savepoint waits for a job's first statement: a handler that sends none (it
    calls an API, or has nothing to do) saves the round trip."""

    @jobs.handler("tests.group_quiet", max_attempts=1)
    def quiet(ctx: jobs.JobContext) -> None:
        if ctx.payload.get("fail"):
            raise jobs.PermanentError("failed before touching the database")

    try:
        worker = EngineWorker(name="quiet", batch_size=10)
        engine.enqueue("tests.group_quiet", {})
        assert worker.run_once() == 1
        engine.enqueue_many("tests.group_quiet", [{}, {}, {}])
        with CaptureQueriesContext(connection) as queries:
            assert worker.run_once() == 3
        assert not [q for q in queries.captured_queries if q["sql"].startswith("SAVEPOINT")]

        quiet_ids = engine.enqueue_many("tests.group_quiet", [{}, {"fail": True}, {}])
        assert worker.run_once() == 3
        states = dict(Job.objects.filter(pk__in=quiet_ids).values_list("pk", "state"))
        assert states == {quiet_ids[0]: "succeeded", quiet_ids[1]: "failed", quiet_ids[2]: "succeeded"}
    finally:
        registry.unregister("tests.group_quiet")


def test_a_savepoint_precedes_the_engines_own_statements_in_a_grouped_job(hits_table):
    """A grouped handler's children go in through the engine's SQL, not the ORM; its
    failure after enqueuing them rolls them back with its own writes, and the group's
    other jobs keep theirs."""

    @jobs.handler("tests.group_parent", max_attempts=1)
    def parent(ctx: jobs.JobContext) -> None:
        jobs.enqueue("tests.group_write", {"from": ctx.job.pk})
        if ctx.payload.get("fail"):
            raise jobs.PermanentError("failed after enqueuing")

    try:
        worker = EngineWorker(name="parents", batch_size=10)
        engine.enqueue("tests.group_parent", {})
        assert worker.run_once() == 1
        assert worker.run_once() == 1  # its child
        ids = engine.enqueue_many("tests.group_parent", [{}, {"fail": True}, {}])
        assert worker.run_once() == 3

        states = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
        assert states == {ids[0]: "succeeded", ids[1]: "failed", ids[2]: "succeeded"}
        children = Job.objects.filter(type="tests.group_write", payload__has_key="from")
        assert sorted(child.payload["from"] for child in children) == sorted(
            pk
            for pk in Job.objects.filter(type="tests.group_parent").values_list("pk", flat=True)
            if pk != ids[1]
        )
    finally:
        registry.unregister("tests.group_parent")


def test_a_grouped_job_whose_first_statement_fails_leaves_the_group_usable(hits_table):
    worker = warmed_worker()
    ids = engine.enqueue_many("tests.group_write", [{}, {}, {}])
    with connection.cursor() as cursor:  # the middle job's insert will collide
        cursor.execute("INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, 0)", [ids[1]])

    assert worker.run_once() == 3

    states = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
    assert states == {ids[0]: "succeeded", ids[1]: "failed", ids[2]: "succeeded"}
    assert "IntegrityError" in Job.objects.get(pk=ids[1]).last_error


def test_a_grouped_job_that_starts_with_a_copy_rolls_it_back_when_it_fails(hits_table):
    """``cursor.copy()`` passes no execute wrapper: the savepoint is set when the job's
    first cursor is made."""

    @jobs.handler("tests.group_copy", max_attempts=1)
    def copy_then_maybe_fail(ctx: jobs.JobContext) -> None:
        with (
            connection.cursor() as cursor,
            cursor.copy("COPY tests_hits (job_id, worker_pid) FROM STDIN") as copy,
        ):
            copy.write_row((ctx.job.pk, 0))
        if ctx.payload.get("fail"):
            raise jobs.PermanentError("failed after copying")

    try:
        worker = EngineWorker(name="copier", batch_size=10)
        engine.enqueue("tests.group_copy", {})
        assert worker.run_once() == 1
        ids = engine.enqueue_many("tests.group_copy", [{}, {"fail": True}, {}])
        assert worker.run_once() == 3

        states = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
        assert states == {ids[0]: "succeeded", ids[1]: "failed", ids[2]: "succeeded"}
        with connection.cursor() as cursor:
            cursor.execute("SELECT job_id FROM tests_hits WHERE job_id = ANY(%s)", [ids])
            assert sorted(row[0] for row in cursor.fetchall()) == [ids[0], ids[2]]
    finally:
        registry.unregister("tests.group_copy")
