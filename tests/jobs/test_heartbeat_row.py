"""A heartbeat writes its worker's row back if a reaper deleted it, but never once the
worker is stopping: a late beat must not bring back a row the worker just unregistered."""

from __future__ import annotations

import threading

import pytest

from jobs.heartbeat import Heartbeat
from jobs.models import Worker
from jobs.worker import EngineWorker

pytestmark = pytest.mark.django_db


def test_a_beat_writes_a_reaped_row_back_but_not_after_the_worker_stopped(clock):
    worker = EngineWorker(name="host:1")
    done = threading.Event()
    beat = Heartbeat(worker, done)
    beat._beat()
    Worker.objects.filter(name="host:1").delete()  # reaped during a long pause

    beat._beat()
    assert Worker.objects.filter(name="host:1").exists()

    done.set()
    Worker.objects.filter(name="host:1").delete()  # unregistered as it stops
    beat._beat()
    assert not Worker.objects.filter(name="host:1").exists()
