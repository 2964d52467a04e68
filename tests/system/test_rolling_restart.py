"""A rolling restart loses nothing and runs nothing twice.

Every cluster process is replaced one by one as a Kubernetes rollout with ``maxSurge: 1``
replaces pods: the new process starts and its engine workers register, then the old one
gets its preStop hook (its drain file: its workers stop claiming and hand back what they
have not started) and, at once, SIGTERM, and must exit 0. Jobs arrive in waves, one
just before each replacement, so that every old process is stopped with work due.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection

from jobs import engine
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from tests.support.processes import Proc, Processes

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

JOBS = 10_000
CLUSTERS = 3  # replaced one by one
WORKERS = 2  # engine workers per cluster process
WAVE = JOBS // (CLUSTERS + 1)  # one wave to start with, one before each replacement


@dataclass
class Cluster:
    proc: Proc
    drain: Path
    workers: set[str]  # its Worker rows' names

    @property
    def pids(self) -> set[int]:
        return {int(name.split(":")[-2]) for name in self.workers}  # host:pid:suffix


def worker_names() -> set[str]:
    return set(Worker.objects.values_list("name", flat=True))


def start_cluster(processes: Processes, number: int, tmp_path: Path) -> Cluster:
    """A cluster process with a drain file of its own, once its engine workers registered."""
    drain = tmp_path / f"drain-{number}"
    before = worker_names()
    proc = processes.manage(
        f"cluster-{number}",
        "qcluster",
        env=processes.env(JOBS_WORKERS=str(WORKERS), JOBS_DRAIN_FILE=str(drain)),
    )
    wait_until(
        lambda: len(worker_names() - before) >= WORKERS or proc.exited(),
        60,
        f"cluster-{number}'s engine workers to register",
    )
    assert not proc.exited(), proc.tail()
    return Cluster(proc, drain, worker_names() - before)


def enqueue_wave(wave: int) -> None:
    engine.enqueue_many("tests.record", [{"n": wave * WAVE + n} for n in range(WAVE)])


def unfinished() -> int:
    return Job.objects.unfinished().count()


def hits_by_pid() -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT worker_pid, count(*) FROM tests_hits GROUP BY worker_pid")
        return dict(cursor.fetchall())


def test_replacing_every_cluster_process_while_jobs_drain_runs_each_job_once(processes, hits_table, tmp_path):
    started = time.monotonic()
    enqueue_wave(0)
    old = [start_cluster(processes, n, tmp_path) for n in range(CLUSTERS)]
    new: list[Cluster] = []
    due: list[int] = []  # unfinished jobs as each old process was stopped
    for wave, leaving in enumerate(old, start=1):
        new.append(start_cluster(processes, CLUSTERS + wave - 1, tmp_path))
        enqueue_wave(wave)
        due.append(unfinished())
        assert due[-1] > 0, "the work ran out before the replacement: it proves nothing"
        leaving.drain.touch()  # the preStop hook; the kubelet signals as soon as it returns
        leaving.proc.signal(signal.SIGTERM)
        status = leaving.proc.wait(60)
        assert status == 0, f"exit status {status}\n{leaving.proc.tail()}"
        # At once, before the reaper would delete stale rows: the workers unregistered.
        assert not leaving.workers & worker_names(), leaving.proc.tail()
    wait_until(lambda: unfinished() == 0, 60, "every job to finish")
    seconds = time.monotonic() - started

    jobs = Job.objects.all()
    assert jobs.count() == JOBS
    assert jobs.filter(state=Job.State.SUCCEEDED).count() == JOBS
    # One attempt and no rescue each: no job was taken from a stopping worker by the
    # reaper, and none started twice (a handed-back job gets its attempt back).
    assert not jobs.exclude(attempts=1).exists(), list(jobs.exclude(attempts=1)[:10].values())
    assert not jobs.exclude(rescues=0).exists(), list(jobs.exclude(rescues=0)[:10].values())
    with connection.cursor() as cursor:  # one row per job id (the key), and each a job's
        cursor.execute(
            "SELECT count(*), count(DISTINCT h.job_id) FROM tests_hits h JOIN jobs_job j ON j.id = h.job_id"
        )
        assert cursor.fetchone() == (JOBS, JOBS)

    by_pid = hits_by_pid()
    known = set().union(*(cluster.pids for cluster in old + new))
    assert set(by_pid) <= known, f"hits from unknown processes: {set(by_pid) - known}"
    old_pids = set().union(*(c.pids for c in old)) & set(by_pid)
    new_pids = set().union(*(c.pids for c in new)) & set(by_pid)
    assert len(old_pids) >= 2 and len(new_pids) >= 2, by_pid
    assert worker_names() == set().union(*(cluster.workers for cluster in new))

    released = JobEvent.objects.filter(kind=JobEvent.Kind.RELEASED).count()
    per_process = ", ".join(f"{c.proc.name} {sum(by_pid.get(p, 0) for p in c.pids)}" for c in old + new)
    print(
        f"\n{JOBS:,} jobs, {CLUSTERS} cluster processes replaced, in {seconds:.1f} s; "
        f"unfinished at each replacement {due}; {released} handed back; "
        f"hits per process: {per_process}"
    )
