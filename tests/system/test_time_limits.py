"""A handler that will not stop: its worker process records the attempt, hands back the
rest of its batch, and exits so that a fresh process takes over."""

from __future__ import annotations

import pytest

from jobs import engine
from jobs.models import Job, Worker
from jobs.testing import wait_until
from jobs.worker import EXIT_STUCK_HANDLER
from tests.support.processes import Processes

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

FAST = {"JOBS_LEASE_SECONDS": "2", "JOBS_HEARTBEAT_SECONDS": "0.5", "JOBS_STUCK_GRACE_SECONDS": "0.5"}


def test_a_worker_whose_handler_ignores_its_time_limit_exits_and_is_replaced(processes: Processes, tmp_path):
    started = tmp_path / "started"
    stuck = engine.enqueue("tests.blocked", {"started": str(started), "for": 60})
    after = engine.enqueue("tests.noop", {"n": 1})
    worker = processes.manage("stuck", "jobs_worker", "--batch-size", "2", env=processes.env(**FAST))

    assert worker.wait(30) == EXIT_STUCK_HANDLER
    stuck.refresh_from_db()
    assert (stuck.state, stuck.error_kind) == (Job.State.FAILED, Job.ErrorKind.TIMEOUT)
    assert "did not stop; its worker process exited" in stuck.last_error
    assert "blocked in one C call" not in stuck.last_error
    assert Job.objects.get(pk=after.pk).state == Job.State.PENDING  # handed back unstarted

    processes.manage("replacement", "jobs_worker", env=processes.env(**FAST))
    wait_until(
        lambda: Job.objects.get(pk=after.pk).state == Job.State.SUCCEEDED,
        30,
        "the replacement worker to run the job handed back",
    )


def test_in_the_cluster_the_stuck_process_is_replaced_and_work_goes_on(processes: Processes, tmp_path):
    cluster = processes.manage("qcluster", "qcluster", env=processes.env(JOBS_WORKERS="1", **FAST))
    wait_until(
        lambda: Worker.objects.count() == 1 or cluster.exited(), 60, "the cluster's engine worker to register"
    )
    first = Worker.objects.get().pid
    stuck = engine.enqueue("tests.blocked", {"started": str(tmp_path / "started"), "for": 60})

    wait_until(
        lambda: Job.objects.get(pk=stuck.pk).state == Job.State.FAILED or cluster.exited(),
        30,
        "the stuck job to be recorded",
    )
    after = engine.enqueue("tests.noop", {"n": 2})

    wait_until(
        lambda: Job.objects.get(pk=after.pk).state == Job.State.SUCCEEDED or cluster.exited(),
        60,
        "a new cluster process to run the next job",
    )
    assert not cluster.exited(), cluster.tail()
    assert Worker.objects.exclude(pid=first).exists()


def test_a_handler_stuck_inside_a_commit_group_still_ends_its_process(processes: Processes, tmp_path):
    """The group's transaction keeps its jobs' rows locked while the handler is stuck:
    recording the failure cannot wait for them, the process exits all the same, and the
    group's jobs are rescued and run by the next worker."""
    warm_up = [engine.enqueue("tests.fast_or_blocked", {}) for _ in range(3)]
    worker = processes.manage("grouping", "jobs_worker", "--batch-size", "5", env=processes.env(**FAST))
    wait_until(
        lambda: (
            all(Job.objects.get(pk=j.pk).state == Job.State.SUCCEEDED for j in warm_up) or worker.exited()
        ),
        30,
        "the warm-up jobs",
    )
    started = tmp_path / "started"
    group = [
        engine.enqueue("tests.fast_or_blocked", payload)
        for payload in ({}, {"block": True, "started": str(started)}, {})
    ]

    assert worker.wait(30) == EXIT_STUCK_HANDLER
    assert started.exists()
    processes.manage("rescuer", "jobs_worker", env=processes.env(**FAST))
    wait_until(
        lambda: all(Job.objects.get(pk=j.pk).state == Job.State.SUCCEEDED for j in group),
        60,
        "the group's jobs to be rescued and run",
    )
