"""Two worker processes: a handler that waits minutes on something outside does not hold
up the quick job claimed with it, which the idle worker runs meanwhile."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from jobs import engine
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from tests.support.processes import Processes
from tests.system.test_worker_death import FAST, hits, started_attempt

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]


def start_worker(processes: Processes, name: str, count: int) -> None:
    processes.manage(name, "jobs_worker", env=processes.env(**FAST))
    wait_until(lambda: Worker.objects.count() >= count, 60, f"{name} to register")


def test_a_quick_job_claimed_with_a_waiting_one_runs_on_another_worker_meanwhile(
    processes, hits_table, tmp_path: Path
):
    start_worker(processes, "first", 1)
    started, release = tmp_path / "started", tmp_path / "release"
    with transaction.atomic():  # one commit, one claim: the first worker takes both
        waiting = engine.enqueue(
            "tests.hand_back_and_wait",
            priority=10,
            payload={"started": str(started), "release": str(release), "max_wait": 60},
        )
        quick = engine.enqueue("tests.record")
        # Due a moment ago, so that one claim sees both due (see test_worker_death).
        Job.objects.filter(pk__in=[waiting.pk, quick.pk]).update(
            run_after=timezone.now() - timedelta(seconds=5)
        )
    wait_until(lambda: started_attempt(started, 1), 30, "the waiting job to start")
    claims = JobEvent.objects.filter(job_id__in=[waiting.pk, quick.pk], kind=JobEvent.Kind.CLAIMED)
    assert claims.count() == 2 and len({event.worker for event in claims}) == 1, (
        "both jobs were to be claimed by the first worker, in one batch"
    )

    start_worker(processes, "second", 2)  # idle: the first is busy waiting

    wait_until(
        lambda: Job.objects.get(pk=quick.pk).is_finished, 30, "the quick job to finish while the other waits"
    )
    quick.refresh_from_db()
    assert (quick.state, quick.attempts) == (Job.State.SUCCEEDED, 1)
    assert Job.objects.get(pk=waiting.pk).state == Job.State.RUNNING  # still waiting
    kinds = list(quick.events.values_list("kind", "worker"))
    assert [kind for kind, _ in kinds] == ["claimed", "released", "claimed", "succeeded"]
    first = kinds[0][1]
    assert kinds[1][1] == first and kinds[2][1] != first  # run by the other worker
    assert len(hits(quick.pk)) == 1

    release.touch()
    wait_until(lambda: Job.objects.get(pk=waiting.pk).is_finished, 30, "the waiting job to end")
    waiting.refresh_from_db()
    assert (waiting.state, waiting.attempts) == (Job.State.SUCCEEDED, 1)
    assert waiting.result["handed_back"] == 1
