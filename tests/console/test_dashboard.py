from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from console import dashboard
from jobs import engine
from jobs.models import Job
from tests.support.base import make_job, staff, tenant

pytestmark = pytest.mark.django_db


def ran_for(clock, seconds: float, name: str = "tests.noop", *, fail: bool = False, **options) -> Job:
    """Enqueue a job, claim it, let ``seconds`` pass on the clock, then finish it."""
    job = make_job(name, **options)
    batch = engine.claim("w1", limit=1, types=[name])
    assert [claimed.pk for claimed in batch.jobs] == [job.pk]
    clock.advance(seconds)
    if fail:
        engine.fail(batch.jobs[0], batch.token, "boom", permanent=True)
    else:
        engine.complete(batch.jobs[0], batch.token)
    return job


@pytest.fixture
def scene(clock):
    """One hour of Acme's work (plus one Globex job and one job finished before the
    window), with figures small enough to compute by hand."""
    acme, globex = tenant("Acme"), tenant("Globex")
    ran_for(clock, 100, tenant=acme)  # finishes two hours before the window ends
    clock.advance(7200)
    for seconds in (10, 20, 30, 40):
        ran_for(clock, seconds, tenant=acme)
    ran_for(clock, 60, fail=True, tenant=acme)
    engine.cancel(make_job("tests.noop", tenant=acme))
    ran_for(clock, 7, tenant=globex)

    flaky = make_job("tests.flaky", {"succeed_on": 2}, tenant=acme)
    batch = engine.claim("w1", limit=1, types=["tests.flaky"])
    clock.advance(5)
    engine.fail(batch.jobs[0], batch.token, "flaky attempt 1")  # retry in 60 s
    clock.advance(60)
    batch = engine.claim("w1", limit=1, types=["tests.flaky"])
    assert [job.pk for job in batch.jobs] == [flaky.pk]
    clock.advance(5)
    engine.complete(batch.jobs[0], batch.token)  # 70 s from first start to finish

    crash = make_job("tests.crash", tenant=acme)
    engine.claim("w1", limit=1, types=["tests.crash"])
    clock.advance(7)  # past the 6 s lease
    crash.refresh_from_db()
    assert engine.rescue(crash) == Job.State.PENDING
    rescued_at = clock.now()

    keyed = make_job("tests.keyed", tenant=acme)
    engine.claim("w2", limit=1, types=["tests.keyed"])
    make_job("tests.noop", parent=keyed, tenant=acme)  # waits on a running parent: no lag
    make_job("tests.noop", run_after=clock.now() + timedelta(hours=1), tenant=acme)  # not due
    clock.advance(10)  # the keyed job's lease expires; the rescued crash job waits
    return {"acme": acme, "globex": globex, "rescued_at": rescued_at}


def figures_by_type(board: dashboard.Dashboard) -> dict[str, dashboard.TypeFigures]:
    return {row.type: row for row in board.types}


def test_it_computes_each_types_figures_over_the_window(scene):
    noop = figures_by_type(dashboard.figures("1h"))["tests.noop"]

    # Durations 7 (Globex), 10, 20, 30, 40 and 60 (failed); the cancelled job never ran.
    assert (noop.finished, noop.succeeded, noop.failed, noop.cancelled) == (7, 5, 1, 1)
    assert noop.throughput_per_min == pytest.approx(7 / 60)
    assert noop.failure_rate == pytest.approx(1 / 6)
    assert noop.p50_seconds == pytest.approx(25.0)  # between 20 and 30
    assert noop.p95_seconds == pytest.approx(55.0)  # 40 + 0.75 × (60 − 40)
    assert (noop.retries, noop.rescues) == (0, 0)


def test_a_retried_job_counts_its_retry_and_its_whole_duration(scene):
    flaky = figures_by_type(dashboard.figures("1h"))["tests.flaky"]

    assert (flaky.finished, flaky.succeeded, flaky.retries) == (1, 1, 1)
    assert flaky.p50_seconds == pytest.approx(70.0)
    assert flaky.failure_rate == 0.0


def test_a_rescue_shows_even_for_a_type_with_nothing_finished(scene):
    crash = figures_by_type(dashboard.figures("1h"))["tests.crash"]

    assert (crash.finished, crash.rescues, crash.retries) == (0, 1, 0)
    assert crash.failure_rate is None
    assert crash.p50_seconds is None


def test_it_reports_queue_lag_of_claimable_jobs_only(scene, clock):
    board = dashboard.figures("1h")

    # Due: only the rescued crash job. The child waits on its parent, the other job is
    # scheduled for later, the keyed job is running.
    assert [(lag.queue, lag.due) for lag in board.queues] == [("default", 1)]
    assert board.queues[0].oldest_due_at == scene["rescued_at"]
    assert board.queues[0].lag_seconds == pytest.approx(10.0)


def test_it_counts_running_jobs_whose_lease_expired(scene):
    assert dashboard.figures("1h").expired_leases == 1


def test_a_narrower_window_leaves_older_jobs_out(scene):
    board = dashboard.figures("15m")

    noop = figures_by_type(board)["tests.noop"]
    assert noop.finished == 7
    assert noop.throughput_per_min == pytest.approx(7 / 15)
    assert board.until - board.since == timedelta(minutes=15)


def test_the_window_excludes_jobs_finished_before_it(clock):
    ran_for(clock, 5)
    clock.advance(3601)

    assert dashboard.figures("1h").types == []
    assert figures_by_type(dashboard.figures("24h"))["tests.noop"].finished == 1


def test_an_unknown_window_is_refused():
    with pytest.raises(ValueError, match="use one of 15m, 1h, 24h, 7d"):
        dashboard.figures("2h")


def test_the_api_scopes_the_figures_to_the_callers_tenant(scene):
    client = APIClient()
    client.force_login(staff("alice", of=scene["acme"], is_staff=False))

    response = client.get("/api/jobs/dashboard/", {"window": "1h"})

    assert response.status_code == 200
    noop = next(row for row in response.json()["types"] if row["type"] == "tests.noop")
    # Without Globex's 7 s job: durations 10, 20, 30, 40, 60.
    assert (noop["finished"], noop["succeeded"], noop["failed"]) == (6, 4, 1)
    assert noop["p50_seconds"] == pytest.approx(30.0)
    assert noop["p95_seconds"] == pytest.approx(56.0)  # 40 + 0.8 × (60 − 40)
    assert noop["failure_rate"] == pytest.approx(0.2)
    assert response.json()["expired_leases"] == 1


def test_the_api_shows_another_tenant_nothing_of_acmes_work(scene):
    client = APIClient()
    client.force_login(staff("gina", of=scene["globex"]))

    body = client.get("/api/jobs/dashboard/").json()

    assert [row["type"] for row in body["types"]] == ["tests.noop"]
    assert body["types"][0]["finished"] == 1
    assert body["queues"] == [] and body["expired_leases"] == 0
    assert body["window"] == "1h"


def test_a_user_without_a_tenant_sees_empty_figures(scene):
    client = APIClient()
    client.force_login(staff("nemo"))

    body = client.get("/api/jobs/dashboard/").json()

    assert (body["types"], body["queues"], body["expired_leases"]) == ([], [], 0)


@pytest.mark.parametrize("query", [{"window": "2h"}, {"window": ""}, {"windw": "1h"}])
def test_the_api_refuses_a_bad_window_naming_the_parameter(query):
    client = APIClient()
    client.force_login(staff("olga", operator=True))

    response = client.get("/api/jobs/dashboard/", query)

    assert response.status_code == 400
    assert set(response.json()) == set(query)


def _plan(queryset, *, index: str, table: str) -> str:
    """The plan of ``queryset`` with the other secondary indexes of ``table`` out of the
    way (dropped in a savepoint that is rolled back) and sequential scans priced out: the
    partial index is used only if the query's predicate matches its condition. Which
    index the planner would prefer otherwise depends on table statistics, which
    autovacuum rewrites as the suite runs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname <> %s "
            "AND indexdef NOT LIKE 'CREATE UNIQUE INDEX%%'",
            [table, index],
        )
        others = [row[0] for row in cursor.fetchall()]
    with transaction.atomic(), connection.cursor() as cursor:
        for name in others:
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = queryset.explain()
        transaction.set_rollback(True)
    return plan


def test_the_finished_figures_query_is_served_by_job_finished_idx(clock):
    until = clock.now()
    plan = _plan(
        dashboard.finished_by_type(until - timedelta(hours=1), until),
        index="jobs_job_finished_idx",
        table="jobs_job",
    )
    assert "jobs_job_finished_idx" in plan


def test_the_retry_and_rescue_counts_are_served_by_jobevent_incident_idx(clock):
    until = clock.now()
    plan = _plan(
        dashboard.incidents_by_type(until - timedelta(hours=1), until),
        index="jobs_jobevent_incident_idx",
        table="jobs_jobevent",
    )
    assert "jobs_jobevent_incident_idx" in plan
