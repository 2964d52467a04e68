"""Live job event streams: the hub's fan-out, SSE replay and end, WebSocket subscriptions.

Events reach the hub through its real source, which reads the committed history rows
(``console.streams.pgsource``), so these tests commit (transactional database); the
async code runs in ``asyncio.run``, database writes in ``sync_to_async`` threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection, transaction
from django.test import AsyncClient
from django.utils import timezone
from rest_framework.authtoken.models import Token

from console.streams.hub import Filter, Subscription, get_hub
from console.streams.ws import JobEventsConsumer
from jobs.models import Job, JobEvent
from tests.console.builders import run_streams
from tests.support.base import make_job, run_next, staff, tenant

pytestmark = pytest.mark.django_db(transaction=True)
T = TypeVar("T")


def db(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """``fn`` in a worker thread whose connection is closed afterwards (an open one
    would keep the test database from being dropped)."""

    def closing(*args: Any) -> T:
        try:
            return fn(*args)
        finally:
            connection.close()

    return sync_to_async(closing)


async def collect(sub: Subscription, count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while len(events) < count:
        batch = await sub.get(timeout=10)
        assert batch is not None, f"only {len(events)} of {count} events arrived"
        events += [e.data for e in batch.events]
    return events


def event_ids(**filters: Any) -> list[int]:
    return list(JobEvent.objects.filter(**filters).order_by("id").values_list("id", flat=True))


def parse_sse(text: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """(event name, data, id) per frame; comments are skipped."""
    frames = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "data" in fields:
            frames.append((fields.get("event", "message"), json.loads(fields["data"]), fields.get("id")))
    return frames


async def read_after_open(response: Any, then: Callable[[], Awaitable[Any]]) -> str:
    """The stream's text; ``then`` runs once ": open" came (the hub listens by then)."""
    chunks = aiter(response.streaming_content)
    first = await anext(chunks)
    await then()
    rest = [chunk async for chunk in chunks]
    return b"".join(c if isinstance(c, bytes) else c.encode() for c in [first, *rest]).decode()


async def read_stream(response: Any) -> str:
    chunks = [chunk async for chunk in response.streaming_content]
    return b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks).decode()


def test_the_hub_fans_out_by_filter_and_tenant():
    acme, globex = tenant("Acme"), tenant("Globex")
    mine = make_job("tests.noop", tenant=acme)
    theirs = make_job("tests.noop", tenant=globex)

    async def main() -> dict[str, list[dict[str, Any]]]:
        hub = get_hub()
        by_job = await hub.subscribe(Filter(jobs={mine.pk}), True)
        by_pipeline = await hub.subscribe(Filter(pipelines={str(theirs.pipeline_id)}), True)
        acme_types = await hub.subscribe(Filter(types={"tests.noop"}), acme.pk)
        other_type = await hub.subscribe(Filter(types={"tests.flaky"}), True)
        await db(run_next)()
        await db(run_next)()
        got = {
            "job": await collect(by_job, 2),
            "pipeline": await collect(by_pipeline, 2),
            "acme": await collect(acme_types, 2),
        }
        assert not other_type.pending
        return got

    got = run_streams(main)
    assert [e["job"] for e in got["job"]] == [mine.pk, mine.pk]
    assert [e["kind"] for e in got["job"]] == ["claimed", "succeeded"]
    assert {e["job"] for e in got["pipeline"]} == {theirs.pk}
    assert {e["job"] for e in got["acme"]} == {mine.pk}  # Globex's job is not Acme's to see
    first = got["job"][0]
    assert first["pipeline"] == str(mine.pipeline_id) and first["type"] == "tests.noop"
    assert first["state"] == "running" and first["from_status"] == "pending"
    assert set(first) == {
        "id",
        "job",
        "pipeline",
        "type",
        "parent",
        "kind",
        "from_status",
        "to_status",
        "state",
        "attempt",
        "at",
        "message",
        "progress",
        "worker",
    }


def test_sse_replay_after_last_event_id_sends_exactly_what_was_missed_then_ends(settings):
    settings.STREAMS_REPLAY_OVERLAP_SECONDS = 0  # the id > Last-Event-ID part alone
    user = staff(operator=True)
    parent = make_job("tests.parent", {"children": 2})
    for _ in range(3):
        run_next()
    history = event_ids(job__pipeline_id=parent.pipeline_id)
    seen = history[1]

    async def main() -> str:
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(
            f"/sync/pipelines/{parent.pipeline_id}/events", headers={"Last-Event-ID": str(seen)}
        )
        assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
        return await read_stream(response)

    frames = parse_sse(run_streams(main))
    assert [int(i) for name, _, i in frames if name == "job"] == history[2:]
    assert frames[-1][:2] == ("end", {"pipeline": str(parent.pipeline_id), "state": "succeeded"})


def test_sse_sends_live_events_then_end_when_the_job_finishes():
    user = staff(operator=True)
    job = make_job("tests.noop")

    async def main() -> str:
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(f"/jobs/{job.pk}/events")
        return await read_after_open(response, db(run_next))

    frames = parse_sse(run_streams(main))
    assert [data["kind"] for name, data, _ in frames if name == "job"] == ["claimed", "succeeded"]
    assert frames[-1][:2] == ("end", {"job": job.pk, "state": "succeeded"})


def test_sse_of_a_failed_pipeline_ends_failed():
    user = staff(operator=True)
    job = make_job("tests.permanent")
    run_next()

    async def main() -> str:
        client = AsyncClient()
        await client.aforce_login(user)
        return await read_stream(await client.get(f"/sync/pipelines/{job.pipeline_id}/events"))

    assert parse_sse(run_streams(main)) == [
        ("end", {"pipeline": str(job.pipeline_id), "state": "failed"}, None)
    ]


@pytest.mark.parametrize("value", ["abc", "-3", "1.5"])
def test_a_bad_last_event_id_is_a_400(value):
    user = staff(operator=True)
    job = make_job("tests.noop")

    async def main() -> int:
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(f"/jobs/{job.pk}/events", headers={"Last-Event-ID": value})
        return response.status_code

    assert run_streams(main) == 400


def test_anonymous_sse_gets_401_and_no_events_and_a_token_works():
    user = staff(operator=True)
    key = Token.objects.create(user=user).key
    job = make_job("tests.noop")
    run_next()

    async def main() -> tuple[Any, Any, Any]:
        client = AsyncClient()
        anonymous = await client.get(f"/jobs/{job.pk}/events")
        bad = await client.get(f"/jobs/{job.pk}/events", headers={"Authorization": "Token nope"})
        good = await client.get(
            f"/jobs/{job.pk}/events?last_event_id=0", headers={"Authorization": f"Token {key}"}
        )
        return anonymous, bad, await read_stream(good)

    anonymous, bad, text = run_streams(main)
    assert anonymous.status_code == 401 and not anonymous.streaming
    assert bad.status_code == 401
    assert [name for name, _, _ in parse_sse(text)] == ["job", "job", "end"]


def test_another_tenants_job_and_pipeline_are_404():
    job = make_job("tests.noop", tenant=tenant("Globex"))
    user = staff(of=tenant("Acme"))

    async def main() -> list[int]:
        client = AsyncClient()
        await client.aforce_login(user)
        return [
            (await client.get(url)).status_code
            for url in (
                f"/jobs/{job.pk}/events",
                f"/sync/pipelines/{job.pipeline_id}/events",
                "/jobs/999999/events",
            )
        ]

    assert run_streams(main) == [404, 404, 404]


def communicator(user: Any) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(JobEventsConsumer.as_asgi(), "/ws/jobs/")
    ws.scope["user"] = user
    return ws


def test_websocket_subscriptions_deliver_events_and_answer_errors():
    acme = tenant("Acme")
    user = staff(of=acme)
    mine = make_job("tests.noop", tenant=acme)
    foreign = make_job("tests.noop", tenant=tenant("Globex"))

    async def main() -> list[Any]:
        ws = communicator(user)
        connected, _ = await ws.connect()
        assert connected
        replies = []
        for message in (
            {"subscribe": {"jobs": [mine.pk]}},
            {"subscribe": {"job": foreign.pk}},
            {"subscribe": {"pipeline": "nope"}},
            {"watch": 1},
        ):
            await ws.send_json_to(message)
            replies.append(await ws.receive_json_from(5))
        await db(run_next)()
        await db(run_next)()
        replies += [await ws.receive_json_from(5), await ws.receive_json_from(5)]
        await ws.send_json_to({"unsubscribe": {"job": mine.pk}})
        replies.append(await ws.receive_json_from(5))
        assert await ws.receive_nothing(0.2)
        await ws.disconnect()
        return replies

    replies = run_streams(main)
    assert replies[0] == {"subscribed": {"jobs": [mine.pk]}, "refused": []}
    assert replies[1] == {"error": f"job {foreign.pk} not found"}
    assert "error" in replies[2] and "error" in replies[3]
    assert [(r["event"]["job"], r["event"]["kind"]) for r in replies[4:6]] == [
        (mine.pk, "claimed"),
        (mine.pk, "succeeded"),
    ]
    assert replies[6] == {"unsubscribed": {"job": mine.pk}}


def test_an_anonymous_websocket_is_closed_with_4401():
    from project.asgi import application

    async def main() -> Any:
        ws = WebsocketCommunicator(application, "/ws/jobs/", headers=[(b"origin", b"http://localhost")])
        connected, _ = await ws.connect()
        assert connected
        return await ws.receive_output(5)

    assert run_streams(main) == {"type": "websocket.close", "code": 4401}


def test_every_insert_path_reaches_the_hub():
    """bulk_create (as in release and retention paths) reaches the hub too."""
    job = make_job("tests.noop")

    async def main() -> list[dict[str, Any]]:
        sub = await get_hub().subscribe(Filter(jobs={job.pk}), True)

        def insert() -> None:
            JobEvent.objects.bulk_create(
                [JobEvent(job=job, at=job.created_at, kind="released", message=f"n{n}") for n in range(3)]
            )

        await db(insert)()
        return await collect(sub, 3)

    assert [e["message"] for e in run_streams(main)] == ["n0", "n1", "n2"]
    assert Job.objects.get(pk=job.pk).state == "pending"


def mixed_pipeline() -> tuple[Job, Job, Job]:
    """A factor upload's shape: a tenantless first job, then one job per tenant; Globex's
    fails, so that a pipeline-wide end (failed) would differ from Acme's (succeeded)."""
    ingest = make_job("tests.noop")
    acme = make_job("tests.noop", pipeline=ingest.pipeline_id, tenant=tenant("Acme"))
    globex = make_job("tests.permanent", pipeline=ingest.pipeline_id, tenant=tenant("Globex"))
    return ingest, acme, globex


def test_sse_replay_of_a_mixed_pipeline_shows_only_the_readers_tenant():
    ingest, acme, globex = mixed_pipeline()
    for _ in range(3):
        run_next()
    user = staff(of=tenant("Acme"))

    async def main() -> str:
        client = AsyncClient()
        await client.aforce_login(user)
        return await read_stream(
            await client.get(f"/sync/pipelines/{ingest.pipeline_id}/events", {"last_event_id": 0})
        )

    frames = parse_sse(run_streams(main))
    assert [int(i) for name, _, i in frames if name == "job"] == event_ids(job=acme)
    assert frames[-1][:2] == ("end", {"pipeline": str(ingest.pipeline_id), "state": "succeeded"})


def test_live_sse_of_a_mixed_pipeline_shows_only_the_readers_tenant():
    ingest, acme, globex = mixed_pipeline()
    user = staff(of=tenant("Acme"))

    def run_all() -> None:
        for _ in range(3):
            run_next()

    async def main() -> str:
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(f"/sync/pipelines/{ingest.pipeline_id}/events")
        return await read_after_open(response, db(run_all))

    frames = parse_sse(run_streams(main))
    assert {data["job"] for name, data, _ in frames if name == "job"} == {acme.pk}
    assert frames[-1][:2] == ("end", {"pipeline": str(ingest.pipeline_id), "state": "succeeded"})
    # A platform operator sees the whole pipeline, and its end is Globex's failure.
    operator = staff("olga", operator=True)

    async def whole() -> str:
        client = AsyncClient()
        await client.aforce_login(operator)
        return await read_stream(
            await client.get(f"/sync/pipelines/{ingest.pipeline_id}/events", {"last_event_id": 0})
        )

    frames = parse_sse(run_streams(whole))
    assert {data["job"] for name, data, _ in frames if name == "job"} == {ingest.pk, acme.pk, globex.pk}
    assert frames[-1][:2] == ("end", {"pipeline": str(ingest.pipeline_id), "state": "failed"})


def test_a_replay_resends_an_event_committed_after_a_larger_id():
    """Ids are taken at insert, visible at commit: a concurrent transaction can commit a
    smaller id after a client saw a larger one; the replay's overlap still sends it."""
    job = make_job("tests.noop")
    user = staff(operator=True)
    inserted, go = threading.Event(), threading.Event()
    early: list[int] = []

    def slow_transaction() -> None:
        try:
            with transaction.atomic():
                early.append(JobEvent.objects.create(job=job, at=timezone.now(), kind="released").pk)
                inserted.set()
                go.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_transaction)
    thread.start()
    assert inserted.wait(10)
    late = JobEvent.objects.create(job=job, at=timezone.now(), kind="released").pk  # commits first
    go.set()
    thread.join(10)
    assert early[0] < late

    async def main() -> str:
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(f"/jobs/{job.pk}/events", headers={"Last-Event-ID": str(late)})
        chunks = aiter(response.streaming_content)
        text = ""
        while "id: " not in text:  # the job never finishes: read the replay, then let go
            chunk = await anext(chunks)
            text += chunk if isinstance(chunk, str) else chunk.decode()
        await chunks.aclose()
        return text

    assert early[0] in [int(i) for name, _, i in parse_sse(run_streams(main)) if name == "job"]


def test_an_sse_response_never_read_holds_no_subscription():
    user = staff(operator=True)
    job = make_job("tests.noop")

    async def main() -> int:
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(f"/jobs/{job.pk}/events")
        assert response.status_code == 200
        return len(get_hub().subscribers)

    assert run_streams(main) == 0


def test_a_subscribe_cancelled_while_the_hub_starts_leaves_no_subscriber():
    async def main() -> int:
        hub = get_hub()
        task = asyncio.ensure_future(hub.subscribe(Filter(jobs={1}), True))
        await asyncio.sleep(0)  # registered, waiting for the source to listen
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return len(hub.subscribers)

    assert run_streams(main) == 0


def test_a_jobs_subscription_takes_the_visible_ids_and_names_the_refused():
    acme = tenant("Acme")
    mine = make_job("tests.noop", tenant=acme)
    foreign = make_job("tests.noop", tenant=tenant("Globex"))
    user = staff(of=acme)

    async def main() -> tuple[Any, Any]:
        ws = communicator(user)
        assert (await ws.connect())[0]
        await ws.send_json_to({"subscribe": {"jobs": [foreign.pk, mine.pk, 999999]}})
        ack = await ws.receive_json_from(5)
        await db(run_next)()
        event = await ws.receive_json_from(5)
        await ws.disconnect()
        return ack, event

    ack, event = run_streams(main)
    assert ack == {"subscribed": {"jobs": [mine.pk]}, "refused": [foreign.pk, 999999]}
    assert event["event"]["job"] == mine.pk


def test_a_lagging_websocket_is_closed_with_4000_and_opens_no_channel_layer():
    user = staff(operator=True)
    assert get_channel_layer(JobEventsConsumer.channel_layer_alias) is None

    async def main() -> Any:
        ws = communicator(user)
        assert (await ws.connect())[0]
        async with asyncio.timeout(5):
            while not get_hub().subscribers:  # the consumer subscribes after accepting
                await asyncio.sleep(0.01)
        (sub,) = get_hub().subscribers
        sub.cut_loose()
        return await ws.receive_output(5)

    assert run_streams(main) == {"type": "websocket.close", "code": 4000}
    assert JobEventsConsumer.channel_layer_alias not in settings.CHANNEL_LAYERS


def test_sse_replay_shows_members_the_failure_message_and_staff_the_traceback():
    acme = tenant("Acme")
    job = make_job("tests.crash_once", tenant=acme)
    run_next()
    member, staffer = staff("bob", of=acme, is_staff=False), staff("alice", of=acme)

    async def failure(user: Any) -> str:
        client = AsyncClient()
        await client.aforce_login(user)
        text = await read_stream(await client.get(f"/jobs/{job.pk}/events", {"last_event_id": 0}))
        [message] = [
            data["message"] for name, data, _ in parse_sse(text) if name == "job" and data["kind"] == "failed"
        ]
        return message

    async def main() -> tuple[str, str]:
        return await failure(member), await failure(staffer)

    seen_by_member, seen_by_staff = run_streams(main)
    assert seen_by_member == "attempts exhausted (1): RuntimeError: unexpected"
    assert seen_by_staff.startswith(seen_by_member + "\n") and '  File "' in seen_by_staff


def test_live_websocket_events_show_members_the_failure_message_only():
    acme = tenant("Acme")
    job = make_job("tests.crash_once", tenant=acme)
    member, staffer = staff("bob", of=acme, is_staff=False), staff("alice", of=acme)

    async def main() -> dict[str, str]:
        sockets = {"member": communicator(member), "staff": communicator(staffer)}
        for ws in sockets.values():
            await ws.connect()
            await ws.send_json_to({"subscribe": {"job": job.pk}})
            await ws.receive_json_from(5)
        await db(run_next)()
        failed = {}
        for name, ws in sockets.items():
            events = [(await ws.receive_json_from(5))["event"] for _ in range(2)]
            failed[name] = events[-1]["message"]
            await ws.disconnect()
        return failed

    failed = run_streams(main)
    assert failed["member"] == "attempts exhausted (1): RuntimeError: unexpected"
    assert '  File "' in failed["staff"]
