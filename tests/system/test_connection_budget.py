"""How many PostgreSQL connections each process holds (docs/deploy.md, "Connection
budget"), counted in ``pg_stat_activity`` by the names the processes give them: what a
deployment adds up against the server's ``max_connections`` or its pooler's size."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from jobs.models import Worker
from jobs.testing import wait_until
from tests.support.base import make_job, staff
from tests.support.processes import Processes
from tests.system.test_streams import SSEClient

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

HUB = Counter({"conveyor stream listen": 1, "conveyor stream load": 1})


def sessions() -> Counter[str]:
    """The other sessions on the test database, by name (a worker's own suffix removed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return Counter(re.sub(r" \S+:\d+:\w+$", "", name) for (name,) in cursor.fetchall())


def settles_at(expected: Counter[str], what: str) -> None:
    seen: list[Counter[str]] = []
    try:
        wait_until(lambda: seen.append(sessions()) or seen[-1] == expected, 30, what)
    except AssertionError as timeout:
        raise AssertionError(
            f"{timeout}: expected {dict(expected)}, last seen {dict(seen[-1]) if seen else '-'}"
        ) from None
    print(f"{what}: {dict(expected)}")


@pytest.mark.parametrize("workers", [1, 3])
def test_a_cluster_pod_holds_three_per_worker_and_one_for_the_orm_broker(processes: Processes, workers):
    """Each engine worker: its claim loop, its heartbeat and its LISTEN. django-q2's ORM
    broker polls on one more (none with Redis); its scheduler, monitor and worker main
    threads connect only while they run a task (docs/deploy.md counts them at most)."""
    cluster = processes.manage(
        "qcluster", "qcluster", env=processes.env(JOBS_WORKERS=str(workers), REDIS_URL="")
    )
    wait_until(lambda: Worker.objects.count() >= workers or cluster.exited(), 60, "the workers")
    per_worker = {"conveyor engine": workers, "conveyor heartbeat": workers, "conveyor listen": workers}
    settles_at(Counter({**per_worker, "": 1}), f"a cluster of {workers} worker(s)")


def test_a_web_process_holds_a_connection_per_request_and_two_for_all_its_streams(processes: Processes):
    """Requests close theirs when they end (CONN_MAX_AGE=0 under ASGI); every event
    stream of the process shares one LISTEN and one loading connection, whatever their
    number, and WebSockets share them too."""
    port = processes.web(processes.env(REDIS_URL=""))[1]
    user = staff(operator=True)
    token = {"Authorization": f"Token {Token.objects.create(user=user).key}"}
    job = make_job("tests.noop")
    for _ in range(3):
        api = SSEClient(port, f"/api/jobs/{job.pk}/", token)  # a plain GET, read to its end
        assert api.status == 200, api.rest()
        api.rest()
        api.close()
    settles_at(Counter(), "a web process between requests")

    streams = [SSEClient(port, f"/jobs/{job.pk}/events", token) for _ in range(5)]
    assert {stream.status for stream in streams} == {200}
    settles_at(HUB, "a web process with 5 event streams")

    browser = Client()
    browser.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    with connect(
        f"ws://127.0.0.1:{port}/ws/jobs/",
        origin=f"http://127.0.0.1:{port}",
        additional_headers={"Cookie": cookie},
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps({"subscribe": {"job": job.pk}}))
        assert "subscribed" in json.loads(ws.recv(10))
        settles_at(HUB, "and a WebSocket")
    for stream in streams:
        stream.close()


def test_with_redis_web_processes_share_one_relay_for_their_streams(processes: Processes):
    """With REDIS_URL one web process of the whole deployment (elected by an advisory
    lock) follows the history and relays it to Redis, on two connections; every other web process with
    streams keeps one session waiting for that lock, to take over if the relay dies."""
    redis = processes.env(REDIS_URL="redis://127.0.0.1:6379/0")
    ports = [processes.web(redis)[1] for _ in range(2)]
    token = {"Authorization": f"Token {Token.objects.create(user=staff(operator=True)).key}"}
    job = make_job("tests.noop")
    streams = [SSEClient(port, f"/jobs/{job.pk}/events", token) for port in ports for _ in range(3)]
    assert {stream.status for stream in streams} == {200}
    settles_at(
        HUB + Counter({"conveyor stream listen": 1}),
        "two web processes with 3 event streams each, over Redis",
    )
    for stream in streams:
        stream.close()
