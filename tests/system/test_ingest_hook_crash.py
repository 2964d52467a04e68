"""The cluster SIGKILLed while RunHooks is asking Kubernetes for a Job: after recovery
every batch's hook ran to completion, under one Job per try (the rescuer adopts the one
the dead worker asked for), and no batch was published twice."""

from __future__ import annotations

import os
import signal

import pytest

from devtools.fakes.kubernetes import Behaviour, FakeCluster
from ingest.runs import services
from ingest.runs.models import BatchStatus, ExecutionStatus, HookExecution, IngestRecord, IngestRun
from jobs.testing import wait_until
from tests.support.base import tenant
from tests.support.ingest import builders

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

FAST = {
    "JOBS_LEASE_SECONDS": "2",
    "JOBS_HEARTBEAT_SECONDS": "0.5",
    "JOBS_REAPER_SECONDS": "0.5",
    "INGEST_HOOK_POLL_SECONDS": "0.3",
    "INGEST_HOOK_POLL_MAX_SECONDS": "0.3",
}
IMAGE = "registry.example/hooks:1"
BATCHES = 4


def test_a_worker_killed_inside_run_hooks_leaves_each_hook_run_once_and_each_batch_published_once(
    processes, tmp_path
):
    with FakeCluster() as cluster:
        cluster.behaviours[IMAGE] = Behaviour(run_seconds=0.5, create_seconds=0.2, log="ok\n")
        config = cluster.kubeconfig(tmp_path / "kubeconfig")
        env = processes.env(
            **FAST,
            INGEST_HOOK_RUNNER="kubernetes",
            INGEST_KUBECONFIG=str(config),
            INGEST_KUBE_NAMESPACE=cluster.namespace,
        )
        # The second Job's create hangs: its worker is inside the runner's launch, the
        # try's name committed, when it dies.
        cluster.stall_next("POST", cluster.jobs_path, 0.5)
        cluster.stall_next("POST", cluster.jobs_path, 5)
        run = services.start_ingest(
            builders.source(tenant("Acme"), batches=BATCHES, size=3, hooks=[["check"]])
        )
        victim = processes.manage("victim", "jobs_worker", env=env)
        # A call is recorded once answered: one create answered, a try launching.
        wait_until(
            lambda: (
                cluster.count("POST", cluster.jobs_path) >= 1
                and HookExecution.objects.filter(batch__run=run, status=ExecutionStatus.LAUNCHING).exists()
            ),
            60,
            "a worker to be inside a Job create",
        )
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)

        processes.manage("rescuer", "jobs_worker", env=env)
        wait_until(
            lambda: IngestRun.objects.get(pk=run.pk).finished, 120, "the run to finish after the rescue"
        )

        run.refresh_from_db()
        assert run.status == "succeeded", run.failure_reason
        assert run.batches.filter(status=BatchStatus.PUBLISHED).count() == BATCHES
        assert (run.batches_published, run.records_published) == (BATCHES, BATCHES * 3)
        assert IngestRecord.objects.filter(batch__run=run).count() == BATCHES * 3
        executions = list(HookExecution.objects.filter(batch__run=run))
        assert {(e.status, e.exit_code) for e in executions} == {(ExecutionStatus.SUCCEEDED, 0)}
        # Each execution's try was one Job on the cluster (removed with the run's end); a
        # second create of the same name was refused (409) and adopted.
        names = [job["metadata"]["name"] for job in cluster.received_jobs]
        for execution in executions:
            assert execution.runner_ref in names
        accepted = [c for c in cluster.calls if c.method == "POST" and c.status == 201]
        assert len(accepted) == len({e.runner_ref for e in executions}) == BATCHES
