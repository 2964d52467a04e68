"""The Channels layer without Redis: channels-postgres, across real OS processes."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import pytest
from channels.layers import get_channel_layer
from channels_postgres import db as channels_postgres_db
from channels_postgres.models import GroupChannel, Message
from django.conf import settings
from django.db import connection
from django.utils import timezone

from jobs import retention
from jobs.channel_layer import PostgresChannelLayer
from tests.support.processes import ROOT, database_url

GROUP = "conveyor-layer-test"
# The sender: a separate Python process on the test database, with the settings' layer.
SENDER = f"""
import os, sys, django
django.setup()
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from jobs.channel_layer import PostgresChannelLayer
layer = get_channel_layer()
assert isinstance(layer, PostgresChannelLayer), type(layer)
async_to_sync(layer.group_send)({GROUP!r}, {{"type": "test.hello", "pid": os.getpid()}})
"""


@pytest.mark.skipif(bool(os.environ.get("REDIS_URL")), reason="REDIS_URL selects channels_redis")
@pytest.mark.django_db
def test_without_redis_the_layer_is_channels_postgres_on_the_test_database():
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "jobs.channel_layer.PostgresChannelLayer"
    layer = get_channel_layer()
    assert isinstance(layer, PostgresChannelLayer)
    assert layer.db_params["dbname"] == connection.settings_dict["NAME"]
    assert layer.group_expiry > 0


@pytest.mark.django_db(transaction=True)
def test_group_send_in_another_process_reaches_a_receiver_in_this_one():
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="project.test_settings",
        CONVEYOR_ALLOW_DEV_SECRET="1",
    )

    async def scenario() -> tuple[dict, int]:
        layer = PostgresChannelLayer(prefix="conveyor")  # the settings' prefix; a fresh listener
        channel = await layer.new_channel("test.")
        await layer.group_add(GROUP, channel)
        receive = asyncio.ensure_future(layer.receive(channel))
        try:
            # Once this process LISTENs, the message can only arrive by NOTIFY.
            async with asyncio.timeout(10):
                while not (layer.listener_task_is_running and layer.listener_task_is_running.is_set()):
                    await asyncio.sleep(0.01)
            sender = await asyncio.create_subprocess_exec(
                sys.executable, "-c", SENDER, cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE
            )
            async with asyncio.timeout(30):
                _, stderr = await sender.communicate()
            assert sender.returncode == 0, stderr.decode()
            async with asyncio.timeout(5):
                return await receive, sender.pid
        finally:
            receive.cancel()
            await _close_pool()

    message, pid = asyncio.run(scenario())
    assert message == {"type": "test.hello", "pid": pid}


@pytest.mark.django_db
def test_the_hourly_prune_deletes_the_layers_expired_rows():
    now = timezone.now()
    Message.objects.create(channel="a", message=b"old", expire=now - timedelta(seconds=1))
    fresh = Message.objects.create(channel="a", message=b"new", expire=now + timedelta(seconds=60))
    GroupChannel.objects.create(group_key="g", channel="crashed", expire=now - timedelta(seconds=1))
    live = GroupChannel.objects.create(group_key="g", channel="live", expire=now + timedelta(days=1))

    assert retention.prune_channel_layer() == {
        "channels_postgres.Message": 1,
        "channels_postgres.GroupChannel": 1,
    }
    assert list(Message.objects.values_list("pk", flat=True)) == [fresh.pk]
    assert list(GroupChannel.objects.values_list("pk", flat=True)) == [live.pk]

    Message.objects.filter(pk=fresh.pk).update(expire=now - timedelta(seconds=1))
    retention.prune()  # the jobs.prune job's function sweeps the layer too
    assert not Message.objects.exists()


async def _close_pool() -> None:
    """channels-postgres keeps one pool per process: close it, or the test database
    cannot be dropped at the end of the run."""
    pool, channels_postgres_db.connection_pool = channels_postgres_db.connection_pool, None
    if pool is not None:
        await pool.close()
