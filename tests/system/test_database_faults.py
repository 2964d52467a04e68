"""Workers outlive database faults: PostgreSQL down at start, restarted mid-drain, refusing
a worker's heartbeat; an engine thread that dies takes its process with it, to be replaced;
a live worker's row deleted by the reaper comes back."""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobs import engine, reaper
from jobs.clock import ManualClock, use_clock
from jobs.models import Job, JobEvent, Worker
from jobs.notify import raw_connection
from jobs.testing import wait_until
from tests.support.base import hit_count
from tests.support.processes import Proc, Processes, log_lines

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

LEASE = 2.0
FAST = {"JOBS_LEASE_SECONDS": "2", "JOBS_HEARTBEAT_SECONDS": "0.5", "JOBS_REAPER_SECONDS": "0.5"}


def start_cluster(processes: Processes, workers: int) -> Proc:
    return processes.manage("qcluster", "qcluster", env=processes.env(JOBS_WORKERS=str(workers), **FAST))


def start_worker(processes: Processes, *args: str) -> Proc:
    return processes.manage("jobs_worker", "jobs_worker", *args, env=processes.env(**FAST))


def registered(count: int, *procs: Proc) -> bool:
    for proc in procs:
        assert not proc.exited(), proc.tail()
    return Worker.objects.count() >= count


def every_worker_runs_jobs(timeout: float, tmp_path: Path, names: set[str] | None = None) -> None:
    """Feed jobs that take a moment, one at a time, until every worker named (default:
    every registered one) has run one: a worker busy with one leaves the next to the
    others, and an engine thread that is gone never runs any."""
    starts = tmp_path / "liveness"
    starts.mkdir(exist_ok=True)
    baseline = dict(Worker.objects.values_list("name", "jobs_done"))
    if names is not None:
        baseline = {name: baseline.get(name, 0) for name in names}

    def all_ran() -> bool:
        engine.enqueue("tests.timed", {"starts": str(starts), "seconds": 0.2})
        done = dict(Worker.objects.values_list("name", "jobs_done"))
        return all(done.get(name, 0) > before for name, before in baseline.items())

    wait_until(all_ran, timeout, f"each of {sorted(baseline)} to run a job", interval=0.07)


def all_finished(ids: list[int]) -> bool:
    return (
        not Job.objects.filter(pk__in=ids)
        .exclude(state__in=[Job.State.SUCCEEDED, Job.State.FAILED, Job.State.CANCELLED])
        .exists()
    )


def workers_failing_to_beat(proc: Proc) -> set[str]:
    """Names of the engine workers in ``proc`` that logged a failed heartbeat."""
    return {
        re.search(r"worker (\S+): heartbeat", line).group(1) for line in log_lines(proc, "heartbeat failed")
    }


def test_a_cluster_and_a_worker_started_while_the_database_is_down_run_jobs_once_it_is_back(
    private_database, processes, tmp_path
):
    private_database.stop()
    cluster = start_cluster(processes, workers=2)
    single = start_worker(processes)
    wait_until(
        lambda: log_lines(cluster, "waiting for the database") and workers_failing_to_beat(single),
        60,
        "both to find the database down",
    )
    assert not cluster.exited() and not single.exited()

    private_database.start()
    wait_until(lambda: registered(3, cluster, single), 60, "all three workers to register")
    every_worker_runs_jobs(30, tmp_path)


@pytest.mark.parametrize("command", ["qcluster", "jobs_worker"])
def test_a_process_waiting_for_the_database_stops_at_once_when_asked(command, private_database, processes):
    private_database.stop()
    if command == "qcluster":
        proc = start_cluster(processes, workers=1)
        wait_until(lambda: log_lines(proc, "waiting for the database"), 60, "the wait")
    else:
        proc = start_worker(processes)
        wait_until(lambda: len(log_lines(proc, "heartbeat failed")) >= 3, 60, "the retries")

    proc.signal(signal.SIGTERM)
    # The cluster had not started: its command ends as SIGTERM ends any process.
    assert proc.wait(10) == (-signal.SIGTERM if command == "qcluster" else 0), proc.tail()


def test_a_cluster_process_replaced_during_an_outage_runs_jobs_once_the_database_is_back(
    private_database, processes, tmp_path
):
    cluster = start_cluster(processes, workers=2)
    wait_until(lambda: registered(2, cluster), 60, "the cluster's engine workers to register")
    victim, survivor = Worker.objects.values_list("pid", "name")[:2]
    database = connection.settings_dict["NAME"]

    # Out of connections: no new session, and the cluster's sessions are gone.
    private_database.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    os.kill(victim[0], signal.SIGKILL)  # django-q2 replaces it; its engine finds no database
    wait_until(
        lambda: workers_failing_to_beat(cluster) - {victim[1], survivor[1]},
        60,
        "the replacement's engine to find the database refusing",
    )
    private_database.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')

    wait_until(lambda: Worker.objects.exclude(pid=victim[0]).count() == 2, 60, "the replacement to register")
    live = set(Worker.objects.exclude(pid=victim[0]).values_list("name", flat=True))
    assert survivor[1] in live
    every_worker_runs_jobs(30, tmp_path, live)
    assert not cluster.exited()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_database_restart_mid_drain_loses_no_job_and_runs_none_twice(
    mode, private_database, processes, tmp_path
):
    cluster = start_cluster(processes, workers=2)
    single = start_worker(processes)
    wait_until(lambda: registered(3, cluster, single), 60, "all three workers to register")
    names = set(Worker.objects.values_list("name", flat=True))
    starts = tmp_path / "starts"
    starts.mkdir()
    total = 400
    with transaction.atomic():
        ids = engine.enqueue_many("tests.timed", [{"starts": str(starts), "seconds": 0.01}] * total)

    wait_until(lambda: hit_count() >= total // 5, 60, "a fifth of the jobs to run")
    private_database.restart(mode)
    connection.close()  # the restart ended this process's session too
    assert hit_count() < total, "the restart came too late to interrupt the drain"

    wait_until(lambda: all_finished(ids), 60, "every job to finish")
    states = set(Job.objects.filter(pk__in=ids).values_list("state", flat=True))
    assert states == {Job.State.SUCCEEDED}
    assert hit_count() == total  # one committed run each: a second would have conflicted
    rescued = JobEvent.objects.filter(job_id__in=ids, kind=JobEvent.Kind.RESCUED).count()
    print(
        f"{mode} restart: {rescued} job(s) rescued, "
        f"{len(list(starts.iterdir())) - total} attempt(s) started again"
    )

    assert set(Worker.objects.values_list("name", flat=True)) == names  # no engine was lost
    every_worker_runs_jobs(30, tmp_path)
    assert not cluster.exited() and not single.exited()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_cluster_process_whose_engine_thread_dies_exits_and_is_replaced(processes, tmp_path):
    cluster = start_cluster(processes, workers=2)
    wait_until(lambda: registered(2, cluster), 60, "the cluster's engine workers to register")
    marker = tmp_path / "exited"
    job = engine.enqueue("tests.exit_engine", {"marker": str(marker)})

    victim = int(
        wait_until(lambda: marker.exists() and marker.read_text().strip(), 30, "the engine thread to exit")
    )
    wait_until(lambda: not pid_alive(victim), 30, "the victim process to exit")
    wait_until(
        lambda: Worker.objects.count() == 2 and victim not in Worker.objects.values_list("pid", flat=True),
        60,
        "django-q2 to replace the process and its engine to register",
    )
    assert log_lines(cluster, "ended without a stop request")

    wait_until(lambda: Job.objects.get(pk=job.pk).is_finished, 30, "the job to run again")
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert job.result["pid"] != victim
    assert not cluster.exited()


def test_jobs_worker_exits_with_a_failure_when_an_engine_thread_dies(processes, tmp_path):
    proc = start_worker(processes, "--concurrency", "2")
    wait_until(lambda: registered(2, proc), 60, "both worker threads to register")
    engine.enqueue("tests.exit_engine", {"marker": str(tmp_path / "exited")})

    assert proc.wait(30) == 1, proc.tail()
    assert log_lines(proc, "failed: SystemExit")
    assert not Worker.objects.exists()  # the other thread stopped and unregistered too


def test_a_live_worker_whose_row_the_reaper_deleted_registers_again(processes, tmp_path):
    proc = start_worker(processes)
    wait_until(lambda: registered(1, proc), 60, "the worker to register")
    row = Worker.objects.get()

    # Seen from an hour later, the worker looks dead: the reaper deletes its row.
    with use_clock(ManualClock(timezone.now() + timedelta(hours=1))):
        wait_until(lambda: reaper.reap().ran, 10, "a reaper round")

    wait_until(lambda: log_lines(proc, "registering again"), 10, "the worker to miss its row")
    again = wait_until(
        lambda: Worker.objects.filter(name=row.name).first(), 10, "the heartbeat to write the row again"
    )
    assert (again.pid, again.started_at) == (row.pid, row.started_at)
    assert again.last_seen_at > row.last_seen_at


def start_time(path: Path) -> float:
    return float(path.read_text().split()[1])


def test_a_worker_whose_heartbeat_fails_stops_starting_jobs_before_its_lease_ends(
    processes, hits_table, tmp_path
):
    proc = start_worker(processes)
    wait_until(lambda: registered(1, proc), 60, "the worker to register")
    starts = tmp_path / "starts"
    starts.mkdir()
    with transaction.atomic():  # one commit, one claim: the worker takes all three
        ids = engine.enqueue_many("tests.timed", [{"starts": str(starts), "seconds": 1.5}] * 3)
        Job.objects.filter(pk__in=ids).update(run_after=timezone.now() - timedelta(seconds=5))
    wait_until(lambda: any(starts.iterdir()), 30, "the first job to start")

    admin = raw_connection(dbname="postgres")  # a database cannot refuse its own sessions
    database = connection.settings_dict["NAME"]
    try:
        # The database now refuses new sessions, and the heartbeat's is ended: the worker
        # keeps its other connections, as under connection exhaustion.
        admin.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name LIKE 'conveyor heartbeat %%'",
            [database],
        )
        fault = time.time()
        # Meanwhile a reaper elsewhere takes back whatever lease runs out.
        while time.time() < fault + 2 * LEASE:
            reaper.reap()
            time.sleep(0.2)
    finally:
        admin.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
        admin.close()
    restored = time.time()

    late = [p.name for p in starts.iterdir() if fault + LEASE <= start_time(p) < restored]
    assert not late, f"attempts started after the lease ran out: {late}"
    assert JobEvent.objects.filter(job_id__in=ids, kind=JobEvent.Kind.RELEASED).exists()

    wait_until(lambda: all_finished(ids), 30, "every job to finish")
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {Job.State.SUCCEEDED}
    assert hit_count() == 3
    # At most the job running when the heartbeat failed lost its lease, and only once.
    rescues = list(Job.objects.filter(pk__in=ids).values_list("rescues", flat=True))
    assert sum(rescues) <= 1, rescues
    assert not proc.exited()
