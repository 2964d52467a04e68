"""Which commits wake the workers: those that make work due, one signal per queue.

PostgreSQL serialises the commits of every transaction that sent a NOTIFY, so a signal
sent by each claim or outcome would queue all the workers' commits behind each other.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import transaction

import jobs
from jobs import engine
from jobs.models import Job
from jobs.notify import CHANNEL, Listener

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener(CHANNEL, application_name="test wake signals")
    listening.listen()
    yield listening
    listening.close()


def received(listener: Listener) -> list[str]:
    """Every signal delivered so far (each wait returns at most one)."""
    payloads = []
    while batch := listener.wait(0.2):
        payloads += batch
    return payloads


def test_an_enqueue_burst_sends_one_signal_per_queue(listener):
    with transaction.atomic():
        for n in range(50):
            engine.enqueue("tests.noop", {"n": n})
            engine.enqueue("tests.noop", {"n": n}, queue="reports")
        engine.enqueue_many("tests.noop", [{}] * 100, queue="reports")

    assert sorted(received(listener)) == ["default", "reports"]


def test_claims_starts_outcomes_and_retries_send_no_signal(listener):
    with transaction.atomic():
        engine.enqueue_many("tests.noop", [{}] * 20)
        engine.enqueue("tests.flaky", {})  # fails, and waits a minute for its retry
        engine.enqueue("tests.permanent", {})
    assert received(listener) == ["default"]

    assert jobs.run_until_idle() == 22

    states = sorted(Job.objects.values_list("state", flat=True))
    assert states == ["failed"] + ["pending"] + ["succeeded"] * 20
    assert received(listener) == []
