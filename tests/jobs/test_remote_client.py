"""The remote workers' client (``jobs.remote_client``): the heartbeat loop sends progress,
drops the jobs the engine took away (marking them lost, with the reason), and gives up
on a lease it could not renew for a whole lease."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from django.db import connection

from jobs import engine
from jobs.models import Job
from jobs.remote_client import ControlPlaneError, RemoteClient
from tests.support.base import make_job, staff

TOKEN = "c" * 40
TYPE = "tests.remote_render"


@pytest.mark.django_db(transaction=True)
def test_a_beat_sends_progress_and_drops_a_cancelled_job(settings, live_server, clock):
    settings.JOBS_REMOTE_WORKERS = {"render": {"token": TOKEN, "queues": ["remote-tests"]}}
    kept, cancelled = make_job(TYPE, {"n": 1}), make_job(TYPE, {"n": 2})
    operator = staff("olga")

    def cancel(pk: int) -> None:  # an operator, meanwhile, in the admin
        try:
            engine.cancel(Job.objects.get(pk=pk), actor=operator, via="admin")
        finally:
            connection.close()

    async def scenario() -> tuple[RemoteClient, list]:
        client = RemoteClient(live_server.url, TOKEN, worker="pod-a")
        claim = await client.claim(limit=2)
        jobs = {job.id: job for job in claim.jobs}
        jobs[kept.pk].progress(3, 4, "page 3")
        await asyncio.to_thread(cancel, cancelled.pk)
        await client.heartbeat()
        await client.close()
        return client, [jobs[kept.pk], jobs[cancelled.pk]]

    client, (running, gone) = asyncio.run(scenario())
    assert list(client.held) == [kept.pk]
    assert not running.lost.is_set()
    assert gone.lost.is_set() and gone.lost_reason == "cancelled"
    kept.refresh_from_db()
    assert (kept.progress_done, kept.progress_total, kept.progress_message) == (3, 4, "page 3")


def test_a_lease_no_beat_renewed_for_a_whole_lease_is_given_up():
    now = [100.0]
    claim_answer = {
        "lease": "8c4f3c58-44a4-4b39-8f2c-b8a4d4a8f7a1",
        "worker": "render/pod-a",
        "heartbeat_seconds": 2.0,
        "jobs": [
            {
                "id": 7,
                "type": TYPE,
                "queue": "remote-tests",
                "payload": {},
                "attempt": 1,
                "max_attempts": 2,
                "lease_seconds": 6.0,
                "deadline": None,
                "details": {},
            }
        ],
    }

    def control_plane(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/claim"):
            return httpx.Response(200, json=claim_answer)
        raise httpx.ConnectError("connection refused", request=request)

    async def scenario() -> list:
        client = RemoteClient(
            "http://control-plane",
            TOKEN,
            worker="pod-a",
            transport=httpx.MockTransport(control_plane),
            monotonic=lambda: now[0],
        )
        [job] = (await client.claim(limit=1)).jobs
        now[0] += 4  # two beats lost: the lease (6 s) still holds
        await client.heartbeat()
        lost_early = job.lost.is_set()
        now[0] += 2
        await client.heartbeat()
        await client.close()
        return [lost_early, job, client.held]

    lost_early, job, held = asyncio.run(scenario())
    assert not lost_early
    assert job.lost.is_set() and job.lost_reason == "no heartbeat got through for 6 s: the lease has run out"
    assert held == {}


def test_an_outcome_that_did_not_get_through_is_no_longer_beaten_for():
    """Else its lease is renewed until its time limit fails it; given up, the reaper
    takes it back for another attempt after its lease."""
    claim_answer = {
        "lease": "8c4f3c58-44a4-4b39-8f2c-b8a4d4a8f7a1",
        "worker": "render/pod-a",
        "heartbeat_seconds": 2.0,
        "jobs": [
            {"id": 7, "type": TYPE, "queue": "remote-tests", "payload": {}, "attempt": 1}
            | {"max_attempts": 2, "lease_seconds": 6.0, "deadline": None, "details": {}}
        ],
    }
    beats: list[str] = []

    def control_plane(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/claim"):
            return httpx.Response(200, json=claim_answer)
        if request.url.path.endswith("/heartbeat"):
            beats.append(request.url.path)
            return httpx.Response(200, json={"renewed": [7], "lost": [], "heartbeat_seconds": 2.0})
        return httpx.Response(502, text="bad gateway")

    async def scenario() -> dict:
        client = RemoteClient(
            "http://control-plane", TOKEN, worker="pod-a", transport=httpx.MockTransport(control_plane)
        )
        [job] = (await client.claim(limit=1)).jobs
        with pytest.raises(ControlPlaneError, match="HTTP 502"):
            await client.complete(job, {"rows": 1})
        await client.heartbeat()
        await client.close()
        return client.held

    assert asyncio.run(scenario()) == {}
    assert beats == []


def test_an_unreachable_control_plane_is_an_error_that_says_where():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def scenario() -> None:
        client = RemoteClient(
            "http://control-plane", TOKEN, worker="w", transport=httpx.MockTransport(refuse)
        )
        try:
            await client.claim(limit=1)
        finally:
            await client.close()

    with pytest.raises(ControlPlaneError, match="claim: ConnectError: connection refused"):
        asyncio.run(scenario())
