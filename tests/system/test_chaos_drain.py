"""Four cluster processes drain 20,000 jobs while one of them is killed and replaced:
no job is lost and none runs twice.

Each cluster is what a pod runs (``manage.py qcluster``, ``JOBS_WORKERS`` engine workers
in processes of their own). Mid-drain one cluster is frozen (SIGSTOP to its process
group) at a moment when its workers hold claimed jobs, some of them started, then
SIGKILLed; once its sessions are gone, what its workers held is read, and a new cluster
starts in its place. The reaper takes the held jobs back once their leases end, and the
others run them again.

The handler (``tests.record_run``) appends a row per run to a table with no unique
constraint, so a second run of a job shows as a second row rather than as an error.
It is atomic: its row commits in the transaction that records the job's success (its
own, or its commit group's), so the table holds exactly the runs that counted, and the
killed attempts, whose transactions died with their sessions, leave none. Two rows for
one job would be two attempts both recorded as its success: a claim given to two
workers, or a fence that let a late result through. A non-atomic handler's write would
commit before its outcome; a killed attempt would then leave a row that a correct
engine is allowed to leave (it runs at least once), and the table could not tell that
from a double claim.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import pytest
from django.db import connection
from django.db.models import Count, Q, QuerySet

from jobs import engine
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from tests.support.processes import Proc, Processes

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

JOBS = 20_000
CLUSTERS = 4
WORKERS = 2  # engine workers per cluster process: JOBS_WORKERS' default
TYPE = "tests.record_run"
# Short leases, so that the killed cluster's jobs come back within seconds; a lease is
# still six heartbeats long, so that a live worker on a crowded machine keeps its own.
FAST = {"JOBS_LEASE_SECONDS": "3", "JOBS_HEARTBEAT_SECONDS": "0.5", "JOBS_REAPER_SECONDS": "0.5"}


@dataclass
class Cluster:
    proc: Proc
    workers: set[str]  # its Worker rows' names, host:pid:suffix

    @property
    def pids(self) -> set[int]:
        return {int(name.split(":")[-2]) for name in self.workers}


@pytest.fixture
def runs_table(django_db_blocker):
    """tests_runs: one row per run of ``tests.record_run``, duplicates kept."""
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS tests_runs "
            "(job_id bigint NOT NULL, attempt integer NOT NULL, worker_pid integer NOT NULL)"
        )
        cursor.execute("TRUNCATE tests_runs")
    yield "tests_runs"


def worker_names() -> set[str]:
    return set(Worker.objects.values_list("name", flat=True))


def start_clusters(processes: Processes, names: list[str]) -> list[Cluster]:
    """Start the clusters together; each is returned once its engine workers registered.
    A worker's pid tells its cluster: every process a cluster starts is in its group."""
    before = worker_names()
    procs = [processes.manage(name, "qcluster", env=processes.env(**FAST)) for name in names]

    def registered() -> list[set[str]] | None:
        for proc in procs:
            assert not proc.exited(), proc.tail()
        new = worker_names() - before
        groups = [{n for n in new if _group_of(n) == proc.pid} for proc in procs]
        return groups if all(len(g) >= WORKERS for g in groups) else None

    groups = wait_until(registered, 90, f"{len(names)} clusters' engine workers to register")
    return [Cluster(proc, group) for proc, group in zip(procs, groups, strict=True)]


def _group_of(worker_name: str) -> int | None:
    try:
        return os.getpgid(int(worker_name.split(":")[-2]))
    except ProcessLookupError:
        return None


def sessions(workers: set[str], *, busy: bool = False) -> int:
    """Sessions of ``workers`` (engine, heartbeat, listener); ``busy``: those running a
    statement (a frozen client's backend may stay active only to send it a result)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND split_part(application_name, ' ', 3) = ANY(%s) "
            "AND (NOT %s OR state = 'active' AND wait_event IS DISTINCT FROM 'ClientWrite')",
            [sorted(workers), busy],
        )
        return cursor.fetchone()[0]


def held_by(workers: set[str]) -> dict[int, int]:
    """Jobs ``workers`` hold, with their attempts (counted once started): running under
    their claims, or already rescued from them (the attempts the rescue found)."""
    running = Job.objects.filter(type=TYPE, state=Job.State.RUNNING, locked_by__in=workers)
    rescued = JobEvent.objects.filter(
        Q.create([("message__startswith", f"rescued from {name} ") for name in workers], connector=Q.OR),
        job__type=TYPE,
        kind=JobEvent.Kind.RESCUED,
    )
    return {**dict(rescued.values_list("job_id", "attempt")), **dict(running.values_list("pk", "attempts"))}


def freeze_holding_started_jobs(victim: Cluster) -> None:
    """Stop ``victim``'s process group at a moment when its workers hold jobs and at
    least one of them has started: read once none of its sessions runs a statement (its
    open transaction, a commit group's, is invisible then). Otherwise it resumes and is
    frozen again a moment later."""
    group = victim.proc.pid

    def frozen() -> bool:
        os.killpg(group, signal.SIGSTOP)
        started = False
        try:
            wait_until(lambda: not sessions(victim.workers, busy=True), 10, "the frozen sessions to settle")
            started = any(held_by(victim.workers).values())
        finally:
            if not started:
                os.killpg(group, signal.SIGCONT)
        return started

    wait_until(frozen, 60, f"{victim.proc.name} to hold started jobs", interval=0.02)


def kill(victim: Cluster) -> dict[int, int]:
    """SIGKILL the frozen ``victim``; once its sessions are gone (what they had sent has
    committed, their open transactions rolled back), the jobs they left behind."""
    os.killpg(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait(10)
    wait_until(lambda: sessions(victim.workers) == 0, 30, "the killed workers' sessions to end")
    return held_by(victim.workers)


def test_four_clusters_drain_twenty_thousand_jobs_through_a_kill_each_exactly_once(processes, runs_table):
    started = time.monotonic()
    clusters = start_clusters(processes, [f"cluster-{n}" for n in range(CLUSTERS)])
    jobs = Job.objects.filter(type=TYPE)
    engine.enqueue_many(TYPE, [{"n": n} for n in range(JOBS)])  # one statement, one commit

    done = jobs.filter(state=Job.State.SUCCEEDED)
    wait_until(lambda: done.count() >= JOBS // 4, 120, "a quarter of the drain", interval=0.2)
    victim = clusters[1]
    freeze_holding_started_jobs(victim)
    held = kill(victim)
    assert any(held.values()), held  # a killed attempt: started, its run not committed
    left = jobs.unfinished().count()
    assert left > len(held), "the drain was over at the kill: it proves nothing"
    (replacement,) = start_clusters(processes, ["cluster-replacement"])
    live = [c for c in clusters if c is not victim] + [replacement]

    wait_until(lambda: not jobs.unfinished().exists(), 300, "every job to finish", interval=0.2)
    drained = time.monotonic() - started
    for cluster in live:
        cluster.proc.signal(signal.SIGTERM)
    for cluster in live:
        status = cluster.proc.wait(60)
        assert status == 0, f"exit status {status}\n{cluster.proc.tail()}"
    assert worker_names() <= victim.workers  # the others unregistered on their way out

    by_pid = assert_each_job_succeeded_with_one_committed_run(jobs)
    assert set(by_pid) <= set().union(victim.pids, *(c.pids for c in live)), by_pid
    assert set().union(*(c.pids for c in live if c is not replacement)) <= set(by_pid), by_pid
    released = assert_history_of_one_attempt_unless_rescued(jobs, held)
    per_cluster = {c.proc.name: sum(by_pid.get(pid, 0) for pid in c.pids) for c in clusters + [replacement]}
    print(
        f"\n{JOBS:,} jobs by {CLUSTERS} clusters of {WORKERS} workers in {drained:.1f} s; "
        f"killed {victim.proc.name} holding {len(held)} jobs ({sum(1 for a in held.values() if a)} "
        f"started) with {left:,} unfinished; {released} handed back; runs per cluster: {per_cluster}"
    )


def assert_each_job_succeeded_with_one_committed_run(jobs: QuerySet[Job]) -> dict[int, int]:
    """Nothing lost, nothing run twice: every job succeeded, and has one row in the runs
    table, written by the attempt that succeeded. Returns the runs per worker pid."""
    states = dict(jobs.values("state").annotate(n=Count("id")).values_list("state", "n"))
    assert states == {Job.State.SUCCEEDED: JOBS}, states
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT j.id, j.attempts, array_agg(r.attempt) FROM jobs_job j "
            "LEFT JOIN tests_runs r ON r.job_id = j.id WHERE j.type = %s GROUP BY j.id "
            "HAVING count(r.job_id) <> 1 OR bool_or(r.attempt IS DISTINCT FROM j.attempts) "
            "ORDER BY j.id LIMIT 10",
            [TYPE],
        )
        assert cursor.fetchall() == []
        cursor.execute("SELECT worker_pid, count(*) FROM tests_runs GROUP BY worker_pid")
        by_pid = dict(cursor.fetchall())
    assert sum(by_pid.values()) == JOBS  # and no row of a job that is not one of them
    return by_pid


def assert_history_of_one_attempt_unless_rescued(jobs: QuerySet[Job], held: dict[int, int]) -> int:
    """Only the killed workers' jobs were rescued, once, and ran again (a started one had
    spent an attempt); every other job ran on its first attempt. Each job's history has
    one success, no refused result, and a claim for each time it went back to pending: a
    rescue, or a hand-back of a batch held too long. Returns how many hand-backs."""
    rescued = dict(jobs.filter(rescues__gt=0).values_list("pk", "attempts"))
    assert rescued == {pk: attempts + 1 for pk, attempts in held.items()}
    assert not jobs.filter(rescues__gt=1).exists()
    assert not jobs.exclude(pk__in=held).exclude(attempts=1).exists()
    counts = jobs.annotate(
        claimed=Count("events", filter=Q(events__kind=JobEvent.Kind.CLAIMED)),
        released=Count("events", filter=Q(events__kind=JobEvent.Kind.RELEASED)),
        rescued=Count("events", filter=Q(events__kind=JobEvent.Kind.RESCUED)),
        succeeded=Count("events", filter=Q(events__kind=JobEvent.Kind.SUCCEEDED)),
        refused=Count("events", filter=Q(events__kind=JobEvent.Kind.LEASE_LOST)),
    )
    history = list(counts.values_list("pk", "claimed", "released", "rescued", "succeeded", "refused"))
    odd = [(pk, *row) for pk, *row in history if row != [1 + row[1] + row[2], row[1], int(pk in held), 1, 0]]
    assert odd == [], odd[:10]
    return sum(row[2] for row in history)
