"""A user's open event streams, SSE and WebSocket together, are capped by
STREAMS_MAX_PER_USER; a closed stream frees its slot; other users are not counted.
(Across web processes, and a dead process's slots: tests/system/test_web_bounds.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient

from console.streams.ws import TOO_MANY_STREAMS, JobEventsConsumer
from tests.console.builders import run_streams
from tests.support.base import make_job, staff, tenant

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cap(settings) -> int:
    settings.STREAMS_MAX_PER_USER = 2
    return 2


async def signed_in(user: Any) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


def websocket(user: Any) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(JobEventsConsumer.as_asgi(), "/ws/jobs/")
    ws.scope["user"] = user
    return ws


def test_an_sse_stream_past_the_cap_is_a_429_naming_it_and_a_closed_one_frees_its_slot(cap):
    acme = tenant("Acme")
    alice, bob = staff("alice", of=acme), staff("bob", of=acme)
    job = make_job("tests.noop", tenant=acme)
    url = f"/jobs/{job.pk}/events"

    async def main() -> list[Any]:
        client = await signed_in(alice)
        held = [await client.get(url) for _ in range(cap)]
        refused = await client.get(url)
        others = await (await signed_in(bob)).get(url)
        await sync_to_async(held[0].close)()  # the client went away
        again = await client.get(url)
        for response in [*held[1:], others, again]:
            await sync_to_async(response.close)()
        return [*(r.status_code for r in held), refused, others.status_code, again.status_code]

    *held, refused, others, again = run_streams(main)
    assert held == [200, 200]
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert refused.json() == {
        "detail": "You have 2 event streams open, the most one user may "
        "(STREAMS_MAX_PER_USER): close one to open another.",
        "limit": 2,
    }
    assert (others, again) == (200, 200)


def test_a_websocket_past_the_cap_is_closed_with_4429_and_sse_and_websockets_share_the_count(cap):
    acme = tenant("Acme")
    alice = staff("alice", of=acme)
    job = make_job("tests.noop", tenant=acme)

    async def main() -> tuple[Any, Any, Any, Any]:
        sse = await (await signed_in(alice)).get(f"/jobs/{job.pk}/events")
        first, second = websocket(alice), websocket(alice)
        assert (await first.connect())[0]
        assert (await second.connect())[0]
        refusal = await second.receive_json_from(5)
        closed = await second.receive_output(5)
        await first.disconnect()  # frees its slot
        third = websocket(alice)
        assert (await third.connect())[0]
        await third.send_json_to({"subscribe": {"job": job.pk}})
        served = await third.receive_json_from(5)
        await third.disconnect()
        await sync_to_async(sse.close)()
        return sse.status_code, refusal, closed, served

    sse, refusal, closed, served = run_streams(main)
    assert sse == 200
    assert refusal == {
        "error": "You have 2 event streams open, the most one user may "
        "(STREAMS_MAX_PER_USER): close one to open another.",
        "limit": 2,
    }
    assert closed == {"type": "websocket.close", "code": TOO_MANY_STREAMS}
    assert served == {"subscribed": {"job": job.pk}}
