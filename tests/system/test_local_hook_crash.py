"""Local hooks and the workers that run them, as real processes.

A worker SIGKILLed while its local hook runs leaves nothing of that hook behind, not even
what the hook started in the background, in a session of its own or double-forked: the
rescuing worker's copy of the hook never runs beside the first. A worker that only lost
its lease (stopped, not dead) cannot write its hook's late result over the rescuer's."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.runs import services
from ingest.runs.models import BatchStatus, ExecutionStatus, HookExecution, IngestRecord, IngestRun
from jobs.models import Job, JobEvent
from jobs.testing import wait_until
from tests.support.base import tenant
from tests.support.ingest import builders
from tests.support.ingest.hook_processes import kill_marked, marked

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

FAST = {
    "JOBS_LEASE_SECONDS": "2",
    "JOBS_HEARTBEAT_SECONDS": "0.5",
    "JOBS_REAPER_SECONDS": "0.5",
    "INGEST_HOOK_RUNNER": "local",
}


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory the hook writes in: outside pytest's private temporary root, and open
    to the hook user (``nobody`` under a root worker)."""
    path = Path(tempfile.mkdtemp(prefix="conveyor-hook-marks-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def token() -> Iterator[str]:
    made = f"hook-mark-{uuid.uuid4().hex}"
    yield made
    kill_marked(made)  # what a worker left behind, whatever the outcome


def hook_script(folder: Path, body: str) -> list[str]:
    """A hook's command: a shell script in ``folder`` (the catalogue runs programs, never
    an interpreter given code)."""
    script = folder / "hook.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return [str(script)]


def test_a_worker_killed_while_its_local_hook_runs_leaves_none_of_the_hooks_processes(
    processes, shared, token
):
    # Each copy logs its start and end. The first also starts a ticking loop in a session
    # of its own, a background sleep and a double-forked one, and waits for them; the
    # second (the rescuer's) passes.
    command = hook_script(
        shared,
        f"""
        export HOOK_MARK={token}
        echo start $(date +%s%N) >> {shared}/log
        if mkdir {shared}/first 2>/dev/null; then
            setsid sh -c 'while :; do date +%s%N >> {shared}/ticks; sleep 0.05; done' &
            sleep 600 &
            (sleep 600 &)
            wait
        fi
        echo end $(date +%s%N) >> {shared}/log""",
    )
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, size=2, hooks=[command]))
    env = processes.env(**FAST)
    victim = processes.manage("victim", "jobs_worker", env=env)
    wait_until(
        lambda: (shared / "ticks").exists() and len(marked(token)) >= 4,
        60,
        "the first copy of the hook and what it started to run",
    )

    os.kill(victim.pid, signal.SIGKILL)  # the worker alone, as the kernel's OOM killer would
    victim.wait(10)
    wait_until(lambda: marked(token) == [], 10, "every process of the hook to be gone")

    processes.manage("rescuer", "jobs_worker", env=env)
    wait_until(lambda: IngestRun.objects.get(pk=run.pk).finished, 60, "the run to finish after the rescue")
    run.refresh_from_db()
    assert run.status == "succeeded", run.failure_reason
    assert run.batches.get().status == BatchStatus.PUBLISHED
    assert IngestRecord.objects.filter(batch__run=run).count() == 2
    execution = HookExecution.objects.get(batch__run=run)
    assert (execution.status, execution.exit_code) == (ExecutionStatus.SUCCEEDED, 0)
    # Two copies, one after the other: the first never ended, and nothing of it ran once
    # the second had started.
    log = [line.split() for line in (shared / "log").read_text().splitlines()]
    assert [kind for kind, _ in log] == ["start", "start", "end"]
    second_started = int(log[1][1])
    ticks = [int(tick) for tick in (shared / "ticks").read_text().split()]
    assert ticks and max(ticks) < second_started
    assert marked(token) == []


def test_a_worker_that_lost_its_lease_while_its_local_hook_ran_cannot_write_its_late_result(
    processes, shared, token
):
    # The first copy waits for the test's word, then says so; the second passes at once.
    release = shared / "release"
    command = hook_script(
        shared,
        f"""
        export HOOK_MARK={token}
        if mkdir {shared}/first 2>/dev/null; then
            touch {shared}/started
            n=0
            while [ ! -e {release} ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done
            echo first copy
        else
            echo second copy
        fi""",
    )
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, size=2, hooks=[command]))
    env = processes.env(**FAST)
    victim = processes.manage("victim", "jobs_worker", env=env)
    wait_until(lambda: (shared / "started").exists(), 60, "the first copy of the hook to start")
    hooks_job = Job.objects.get(type="ingest.RunHooks")

    # Stopped, not dead: no heartbeat, so its lease lapses, and its hook keeps running.
    victim.signal(signal.SIGSTOP)
    processes.manage("rescuer", "jobs_worker", env=env)
    wait_until(lambda: IngestRun.objects.get(pk=run.pk).finished, 60, "the rescuer to finish the run")
    rescued = HookExecution.objects.get(batch__run=run)
    assert (rescued.status, rescued.log_tail) == (ExecutionStatus.SUCCEEDED, "second copy\n")

    release.touch()  # the first copy ends and its worker wakes up to its result
    victim.signal(signal.SIGCONT)
    wait_until(
        lambda: JobEvent.objects.filter(job=hooks_job, kind="lease_lost").exists(),
        30,
        "the first worker to find its lease gone",
    )
    execution = HookExecution.objects.get(batch__run=run)
    assert (execution.status, execution.log_tail, execution.finished_at) == (
        ExecutionStatus.SUCCEEDED,
        "second copy\n",
        rescued.finished_at,
    )
    run.refresh_from_db()
    assert run.status == "succeeded" and run.batches_published == 1
    assert IngestRecord.objects.filter(batch__run=run).count() == 2


def test_a_local_hook_does_not_hold_up_the_next_batch_claimed_with_it(processes, shared, token):
    """Batch 1's hooks and batch 2's fetch are due together, and one worker claims both:
    while batch 1's hook runs on it, the idle worker fetches batch 2."""
    command = hook_script(
        shared,
        f"""
        export HOOK_MARK={token}
        echo start >> {shared}/started
        n=0
        while [ ! -e {shared}/release ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done""",
    )
    run = services.start_ingest(builders.source(tenant("Acme"), batches=2, size=2, hooks=[command]))
    env = processes.env(**FAST)
    processes.manage("first", "jobs_worker", env=env)
    wait_until(lambda: (shared / "started").exists(), 60, "batch 1's hook to start")
    fetch = Job.objects.filter(pipeline_id=run.pipeline, type="ingest.RunIngester").latest("pk")
    hooks = HookExecution.objects.get(batch__run=run, batch__sequence=1)
    assert hooks.status == ExecutionStatus.LAUNCHING
    claimed = fetch.events.filter(kind=JobEvent.Kind.CLAIMED).values_list("worker", flat=True)
    assert list(claimed) == [Job.objects.get(pk=hooks_delivery(run, 1)).locked_by], (
        "batch 2's fetch was to be claimed with batch 1's hooks, by the same worker"
    )

    processes.manage("second", "jobs_worker", env=env)
    wait_until(
        lambda: run.batches.filter(sequence=2).exists(), 60, "batch 2 to be fetched while batch 1's hook runs"
    )
    assert (shared / "started").read_text().count("start") >= 1
    assert not (shared / "release").exists()
    assert HookExecution.objects.get(pk=hooks.pk).status == ExecutionStatus.LAUNCHING
    kinds = list(fetch.events.values_list("kind", flat=True))
    assert kinds[:3] == ["claimed", "released", "claimed"], kinds

    (shared / "release").touch()
    wait_until(lambda: IngestRun.objects.get(pk=run.pk).finished, 90, "the run to finish")
    run.refresh_from_db()
    assert run.status == "succeeded", run.failure_reason
    assert run.batches.filter(status=BatchStatus.PUBLISHED).count() == 2


def hooks_delivery(run: IngestRun, sequence: int) -> int:
    """The RunHooks delivery of batch ``sequence`` of ``run``."""
    return next(
        job.pk
        for job in Job.objects.filter(pipeline_id=run.pipeline, type="ingest.RunHooks").order_by("pk")
        if job.payload.get("payload", {}).get("sequence") == sequence
    )
