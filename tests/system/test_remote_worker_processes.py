"""Remote workers as real processes (``tests/support/remote_worker.py``), with no
database: the control plane is this test's live server, its clock the test's. An
operator's cancel reaches the running work within a heartbeat; a worker killed with
SIGKILL loses its job to the reaper, and the next worker runs it once more, to one
success."""

from __future__ import annotations

import signal
import time

import pytest

from jobs import engine, reaper
from jobs.models import Job, JobEvent
from tests.support.base import make_job, staff

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]
TOKEN = "p" * 40
TYPE = "tests.remote_render"  # 6 s lease: a beat every 2 s


@pytest.fixture
def credentials(settings):
    settings.JOBS_REMOTE_WORKERS = {"render": {"token": TOKEN, "queues": ["remote-tests"]}}


def remote_worker(processes, live_server, name: str):
    env = processes.env(DATABASE_URL="postgresql://nobody@127.0.0.1:1/nowhere")
    return processes.start(
        name,
        ["-m", "tests.support.remote_worker", live_server.url, TOKEN, name],
        env=env,
        stdout_pipe=True,
    )


def test_an_operators_cancel_stops_the_remote_work_within_a_heartbeat(
    credentials, processes, live_server, clock
):
    job = make_job(TYPE, {"seconds": 120})
    worker = remote_worker(processes, live_server, "pod-a")
    assert worker.read_line(30) == f"claimed {job.pk} 1"

    cancelled_at = time.monotonic()
    engine.cancel(job, actor=staff("olga", operator=True), reason="wrong page", via="admin")
    # Told at its next beat: within one interval (2 s), well inside the 6 s lease.
    assert worker.read_line(6) == f"lost {job.pk} cancelled"
    print(f"cancel reached the worker in {time.monotonic() - cancelled_at:.2f} s")
    assert worker.wait(10) == 0
    job.refresh_from_db()
    assert (job.state, job.result) == (Job.State.CANCELLED, None)


def test_a_killed_remote_workers_job_is_rescued_and_runs_to_one_success(
    credentials, processes, live_server, clock
):
    job = make_job(TYPE, {"seconds": 3})
    first = remote_worker(processes, live_server, "pod-a")
    assert first.read_line(30) == f"claimed {job.pk} 1"
    first.signal(signal.SIGKILL)
    first.wait(10)

    clock.advance(7)  # past its 6 s lease with no beat
    assert reaper.rescue_expired().rescued == 1
    second = remote_worker(processes, live_server, "pod-b")
    assert second.read_line(30) == f"claimed {job.pk} 2"
    assert second.read_line(15) == f"done {job.pk}"
    assert second.wait(10) == 0

    job.refresh_from_db()
    assert (job.state, job.attempts, job.result) == (Job.State.SUCCEEDED, 2, {"by": "pod-b"})
    kinds = list(job.events.order_by("id").values_list("kind", "worker"))
    assert kinds == [
        (JobEvent.Kind.CLAIMED, "render/pod-a"),
        (JobEvent.Kind.RESCUED, ""),
        (JobEvent.Kind.CLAIMED, "render/pod-b"),
        (JobEvent.Kind.SUCCEEDED, "render/pod-b"),
    ]
