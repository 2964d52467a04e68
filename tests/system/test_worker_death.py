"""Workers die and stop: SIGKILL mid-job loses nothing, SIGTERM lets the job finish."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobs import engine, reaper
from jobs.errors import LeaseLost
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from tests.support.processes import Proc, Processes

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

LEASE = 2.0  # tests.wait_for_file's own lease
FAST = {"JOBS_LEASE_SECONDS": "2", "JOBS_HEARTBEAT_SECONDS": "0.5", "JOBS_REAPER_SECONDS": "0.5"}


def start_cluster(processes: Processes, workers: int) -> Proc:
    cluster = processes.manage("qcluster", "qcluster", env=processes.env(JOBS_WORKERS=str(workers), **FAST))
    wait_until(
        lambda: Worker.objects.count() >= workers or cluster.exited(),
        60,
        "the cluster's engine workers to register",
    )
    assert not cluster.exited(), cluster.tail()
    return cluster


def blocking_job(tmp_path: Path, **options) -> tuple[Job, Path, Path]:
    started, release = tmp_path / "started", tmp_path / "release"
    job = engine.enqueue(
        "tests.wait_for_file", {"started": str(started), "release": str(release), "max_wait": 60}, **options
    )
    return job, started, release


def started_attempt(started: Path, attempt: int) -> int | None:
    """The pid running ``attempt`` of the blocking job, once it has written so."""
    try:
        pid, seen = started.read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    return int(pid) if int(seen) == attempt else None


def hits(job_id: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT worker_pid FROM tests_hits WHERE job_id = %s", [job_id])
        return [row[0] for row in cursor.fetchall()]


def test_a_job_whose_worker_is_killed_runs_again_and_the_late_result_is_refused(
    processes, hits_table, tmp_path
):
    start_cluster(processes, workers=2)
    job, started, release = blocking_job(tmp_path)
    victim = wait_until(lambda: started_attempt(started, 1), 30, "attempt 1 to start")
    stale = Job.objects.get(pk=job.pk)  # the first attempt as its worker knows it
    assert (stale.state, stale.attempts) == (Job.State.RUNNING, 1)

    os.kill(victim, signal.SIGKILL)
    killed_at = timezone.now()
    rescued = wait_until(
        lambda: JobEvent.objects.filter(job=job, kind=JobEvent.Kind.RESCUED).first(),
        15,
        "the reaper to rescue the job",
    )
    latency = (rescued.at - killed_at).total_seconds()
    print(f"rescued {latency:.2f} s after SIGKILL (lease {LEASE:g} s, reaper every 0.5 s)")
    assert latency < 10

    survivor = wait_until(lambda: started_attempt(started, 2), 30, "attempt 2 to start")
    assert survivor != victim
    with pytest.raises(LeaseLost):  # the killed attempt's completion, arriving late
        engine.complete(stale, stale.lease_token, result={"late": True})
    job.refresh_from_db()
    assert (job.state, job.attempts, job.result) == (Job.State.RUNNING, 2, None)
    assert job.lease_token != stale.lease_token

    release.touch()
    wait_until(lambda: Job.objects.get(pk=job.pk).is_finished, 30, "the job to finish")
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert (job.attempts, job.rescues) == (2, 1)
    assert job.result == {"pid": survivor, "attempt": 2}
    assert hits(job.pk) == [survivor]  # the killed attempt wrote nothing that stayed
    with pytest.raises(LeaseLost):  # and still nothing once the job is done
        engine.complete(stale, stale.lease_token, result={"late": True})
    job.refresh_from_db()
    assert job.result == {"pid": survivor, "attempt": 2}


def still_heartbeating(job_id: int, since: datetime) -> bool:
    """One lease after ``since``, is the job still running under a renewed lease? A reaper
    elsewhere (another pod, in a rolling deploy) runs first and must find nothing."""
    with transaction.atomic():
        reaper.rescue_expired()
    job = Job.objects.get(pk=job_id)
    assert job.state == Job.State.RUNNING, "the running job was taken away"
    return job.heartbeat_at > since + timedelta(seconds=LEASE + 0.5)


@pytest.mark.parametrize("command", ["qcluster", "jobs_worker"])
def test_sigterm_lets_the_running_job_finish_and_hands_back_the_rest(
    command, processes, hits_table, tmp_path
):
    if command == "qcluster":
        proc = start_cluster(processes, workers=1)
    else:
        proc = processes.manage("jobs_worker", "jobs_worker", env=processes.env(**FAST))
        wait_until(lambda: Worker.objects.exists(), 60, "the worker to register")
    with transaction.atomic():  # one commit, one claim: the worker takes all six at once
        job, started, release = blocking_job(tmp_path, priority=10)
        waiting = engine.enqueue_many("tests.record", [{"n": n} for n in range(5)])
        # Due a moment ago: a claim that read its clock before this commit but ran after
        # it (a crowded CPU) must not see the first job due and the others not yet.
        Job.objects.filter(pk__in=[job.pk, *waiting]).update(run_after=timezone.now() - timedelta(seconds=5))
    pid = wait_until(lambda: started_attempt(started, 1), 30, "the job to start")
    assert Job.objects.filter(pk__in=waiting, state=Job.State.RUNNING).count() == 5

    proc.signal(signal.SIGTERM)
    stopped_at = timezone.now()
    # Stopping must not let the running job's lease lapse while it finishes.
    wait_until(lambda: still_heartbeating(job.pk, stopped_at), 15, "a heartbeat one lease after SIGTERM")
    release.touch()
    started_wait = time.monotonic()
    assert proc.wait(30) == 0, proc.tail()
    print(f"{command} exited {time.monotonic() - started_wait:.2f} s after the release")

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert (job.attempts, job.rescues) == (1, 0)
    assert hits(job.pk) == [pid]
    for other in Job.objects.filter(pk__in=waiting):
        assert (other.state, other.attempts, other.lease_token) == (Job.State.PENDING, 0, None)
        assert other.events.filter(kind=JobEvent.Kind.RELEASED).exists()
    assert not Job.objects.filter(state=Job.State.RUNNING).exists()
    assert not Worker.objects.exists()  # every worker unregistered on its way out


def test_the_cluster_keeps_working_after_its_database_connections_are_cut(processes, hits_table, tmp_path):
    cluster = start_cluster(processes, workers=1)
    with connection.cursor() as cursor:  # a database restart or failover, as workers see it
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    job = engine.enqueue("tests.record", {})

    wait_until(lambda: Job.objects.get(pk=job.pk).is_finished, 30, "the job to run")
    assert Job.objects.get(pk=job.pk).state == Job.State.SUCCEEDED
    assert not cluster.exited()


def test_jobs_claimed_but_not_started_by_a_killed_worker_spend_no_attempt(processes, hits_table, tmp_path):
    job, started, release = blocking_job(tmp_path, max_attempts=1)
    waiting = engine.enqueue_many("tests.record", [{}] * 19, max_attempts=1)
    victim = processes.manage("victim", "jobs_worker", "--batch-size", "20", env=processes.env(**FAST))
    wait_until(lambda: started_attempt(started, 1), 30, "the first job of the batch to start")
    unstarted = Job.objects.filter(pk__in=waiting, state=Job.State.RUNNING)
    assert unstarted.count() == 19  # claimed with it, not started
    assert set(unstarted.values_list("attempts", flat=True)) == {0}

    victim.signal(signal.SIGKILL)
    processes.manage("rescuer", "jobs_worker", env=processes.env(**FAST))

    wait_until(
        lambda: Job.objects.filter(pk__in=waiting, state=Job.State.SUCCEEDED).count() == 19,
        60,
        "the 19 unstarted jobs to run",
    )
    assert set(Job.objects.filter(pk__in=waiting).values_list("attempts", flat=True)) == {1}
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.FAILED, 1)
    assert "attempts exhausted (1)" in job.last_error


def test_a_worker_frozen_inside_a_commit_group_loses_its_locks_and_its_jobs_are_rescued(
    processes, hits_table, tmp_path
):
    """A group holds its jobs' rows locked until it commits, and the reaper passes over
    locked rows: PostgreSQL ends the frozen session after the lease, and the jobs go on.
    Unfrozen, the pausing handler would be interrupted at its time limit (half the
    lease) and the group would commit with no rescue: the freeze is what is tested."""
    warm_up = engine.enqueue_many("tests.fast_or_pausing", [{}] * 3)
    frozen = processes.manage("frozen", "jobs_worker", "--batch-size", "10", env=processes.env(**FAST))
    wait_until(
        lambda: Job.objects.filter(pk__in=warm_up, state=Job.State.SUCCEEDED).count() == 3,
        30,
        "the warm-up jobs (the type is known fast now)",
    )
    started = tmp_path / "started"
    group = engine.enqueue_many("tests.fast_or_pausing", [{}, {"pause": 3, "started": str(started)}, {}, {}])
    wait_until(started.exists, 30, "the pausing job to start inside its group")

    frozen.signal(signal.SIGSTOP)
    try:
        stopped_at = timezone.now()
        rescuer = processes.manage("rescuer", "jobs_worker", env=processes.env(**FAST))
        wait_until(
            lambda: Job.objects.filter(pk__in=group, state=Job.State.SUCCEEDED).count() == 4,
            45,
            "the frozen group's jobs to be rescued and run",
        )
        rescued = JobEvent.objects.filter(job_id__in=group, kind=JobEvent.Kind.RESCUED)
        assert rescued.count() >= 3  # the whole group, started or not
        print(
            f"rescued {(max(e.at for e in rescued) - stopped_at).total_seconds():.1f} s "
            f"after the freeze (lease {LEASE:g} s)"
        )
    finally:
        frozen.signal(signal.SIGKILL)
    # The frozen group's writes were rolled back with its session: each job wrote once.
    assert {pk: hits(pk) for pk in group} == {pk: [rescuer.pid] for pk in group}


def test_a_slow_handler_inside_a_live_group_is_interrupted_not_rescued(processes, hits_table, tmp_path):
    """The same group, not frozen: the handler that turned slow is stopped at its time
    limit (half the lease) and retried on its own; PostgreSQL never ends the session, so
    the rest of the group commits and nothing is rescued."""
    warm_up = engine.enqueue_many("tests.fast_or_pausing", [{}] * 3)
    processes.manage("live", "jobs_worker", "--batch-size", "10", env=processes.env(**FAST))
    wait_until(
        lambda: Job.objects.filter(pk__in=warm_up, state=Job.State.SUCCEEDED).count() == 3,
        30,
        "the warm-up jobs (the type is known fast now)",
    )
    group = engine.enqueue_many(
        "tests.fast_or_pausing", [{}, {"pause": 5, "started": str(tmp_path / "started")}, {}, {}]
    )

    wait_until(
        lambda: Job.objects.filter(pk__in=group, state=Job.State.SUCCEEDED).count() == 4,
        30,
        "the group to finish",
    )
    assert not JobEvent.objects.filter(job_id__in=group, kind=JobEvent.Kind.RESCUED).exists()
    slow = Job.objects.get(pk=group[1])
    assert slow.attempts == 2
    failed = slow.events.get(kind=JobEvent.Kind.RETRY_SCHEDULED)
    assert "HandlerTimeout" in failed.message
