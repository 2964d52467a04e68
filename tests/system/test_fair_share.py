"""Fair claims across real processes: one tenant's slow jobs hold both workers; when one
of them frees up, it goes to another tenant's job that arrived later, not to the first
tenant's older ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import engine
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from tests.support.base import tenant
from tests.support.processes import Processes

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]


def slow_job(tmp_path: Path, n: int, owner) -> tuple[Job, Path, Path]:
    started, release = tmp_path / f"started-{n}", tmp_path / f"release-{n}"
    job = engine.enqueue(
        "tests.wait_for_file",
        {"started": str(started), "release": str(release), "max_wait": 60},
        tenant=owner,
    )
    return job, started, release


def test_a_freed_worker_goes_to_the_tenant_that_waits_not_to_the_busy_ones_backlog(
    processes: Processes, hits_table, tmp_path
):
    acme, globex = tenant("Acme"), tenant("Globex")
    slow = [slow_job(tmp_path, n, acme) for n in range(4)]
    # One job per claim, so that each of the two workers holds exactly one slow job.
    worker = processes.manage("workers", "jobs_worker", "--concurrency", "2", "--batch-size", "1")
    wait_until(
        lambda: sum(started.exists() for _, started, _ in slow) == 2 or worker.exited(),
        30,
        "both workers to be busy with Acme's jobs",
    )
    assert not worker.exited(), worker.tail()
    assert Worker.objects.count() == 2
    first_release = next(release for _, started, release in slow if started.exists())

    theirs = engine.enqueue("tests.record", {}, tenant=globex)
    first_release.write_text("go")  # one worker frees up

    wait_until(
        lambda: Job.objects.get(pk=theirs.pk).state == Job.State.SUCCEEDED or worker.exited(),
        30,
        "Globex's job to run",
    )
    for _, _, release in slow:
        release.write_text("go")
    wait_until(
        lambda: Job.objects.filter(state=Job.State.SUCCEEDED).count() == 5 or worker.exited(),
        60,
        "every job to finish",
    )
    assert not worker.exited(), worker.tail()

    # The claims in the order they were made (event ids follow the commits).
    claims = list(
        JobEvent.objects.filter(kind=JobEvent.Kind.CLAIMED).order_by("id").values_list("job_id", flat=True)
    )
    assert claims.index(theirs.pk) == 2, "an older Acme job took the freed worker first"
