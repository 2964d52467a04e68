"""A rolling restart loses nothing and runs nothing twice.

Every cluster process is replaced one by one as a Kubernetes rollout with ``maxSurge: 1``
replaces pods: the new process starts and its engine workers register, then the old one
gets its preStop hook (the drain file: its workers stop claiming and hand back what they
have not started) and SIGTERM, and must exit 0. Jobs keep arriving in waves meanwhile,
so that every replacement happens with work due.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest
from django.db import connection

from jobs import engine
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from tests.system.conftest import Proc, Processes

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

JOBS = 10_000
WAVES = 10
CLUSTERS = 3
WORKERS = 2


def start_cluster(processes: Processes, number: int, tmp_path: Path) -> tuple[Proc, Path, set[int]]:
    """A cluster process once its engine workers are registered, its drain file, and
    the pids of its worker processes."""
    drain = tmp_path / f"drain-{number}"
    before = Worker.objects.count()
    proc = processes.manage(f"cluster-{number}", "qcluster", env=processes.env(
        JOBS_WORKERS=str(WORKERS), JOBS_DRAIN_FILE=str(drain), REDIS_URL=""))
    wait_until(lambda: Worker.objects.count() >= before + WORKERS or proc.exited(), 60,
               f"cluster {number}'s engine workers to register")
    assert not proc.exited(), proc.tail()
    pids = {child.pid for child in psutil.Process(proc.pid).children(recursive=True)}
    return proc, drain, pids


def enqueue_wave(wave: int) -> None:
    size = JOBS // WAVES
    engine.enqueue_many("tests.record", [{"n": wave * size + n} for n in range(size)])


def unfinished() -> int:
    return Job.objects.filter(state__in=Job.UNFINISHED).count()


def hits_by_pid() -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT worker_pid, count(*) FROM tests_hits GROUP BY worker_pid")
        return dict(cursor.fetchall())


def test_replacing_every_cluster_process_while_jobs_drain_runs_each_job_once(
        processes: Processes, hits_table, tmp_path):
    started = time.monotonic()
    waves = iter(range(WAVES))
    enqueue_wave(next(waves))
    old = [start_cluster(processes, n, tmp_path) for n in range(CLUSTERS)]
    new = []
    for number, (proc, drain, _) in enumerate(old, start=CLUSTERS):
        new.append(start_cluster(processes, number, tmp_path))
        enqueue_wave(next(waves))
        assert unfinished() > 0, "the work ran out before the replacement"
        drain.touch()  # the preStop hook
        proc.signal(signal.SIGTERM)
        enqueue_wave(next(waves))
        assert proc.wait(60) == 0, proc.tail()
    for wave in waves:
        enqueue_wave(wave)
    wait_until(lambda: unfinished() == 0, 120, "every job to finish")
    seconds = time.monotonic() - started

    assert Job.objects.filter(state=Job.State.SUCCEEDED).count() == JOBS
    assert Job.objects.exclude(attempts=1).count() == 0
    assert Job.objects.exclude(rescues=0).count() == 0
    by_pid = hits_by_pid()
    assert sum(by_pid.values()) == JOBS  # tests_hits is keyed by job: one row each
    old_pids = set().union(*(pids for _, _, pids in old))
    new_pids = set().union(*(pids for _, _, pids in new))
    assert any(by_pid.get(pid) for pid in old_pids) and any(by_pid.get(pid) for pid in new_pids)
    # The stopped processes' workers unregistered on their way out.
    assert Worker.objects.count() == CLUSTERS * WORKERS
    released = JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).count()
    print(f"{JOBS:,} jobs through {2 * CLUSTERS} cluster processes ({CLUSTERS} replaced) in "
          f"{seconds:.1f} s; {released} handed back by draining workers; jobs per process: "
          f"old {sum(by_pid.get(p, 0) for p in old_pids):,}, new {sum(by_pid.get(p, 0) for p in new_pids):,}")
