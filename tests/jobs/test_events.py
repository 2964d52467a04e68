from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

import jobs
from jobs.models import Delivery, Event, Job
from tests.support.base import run_next

pytestmark = pytest.mark.django_db


def test_publish_writes_the_event_and_one_delivery_job_per_subscriber(clock):
    event = jobs.publish("OrderPlaced", {"order": 42})

    deliveries = Delivery.objects.filter(event=event).select_related("job")
    assert sorted(d.subscriber for d in deliveries) == ["tests.audit_order", "tests.on_order_placed"]
    for delivery in deliveries:
        assert delivery.job.payload == {
            "event_id": event.pk,
            "event": "OrderPlaced",
            "payload": {"order": 42},
        }
        assert delivery.deliver_after == clock.now()


def test_an_event_without_subscribers_is_still_recorded():
    event = jobs.publish("NobodyListens", {})
    assert Event.objects.filter(pk=event.pk).exists()
    assert not Job.objects.exists()


def test_a_rolled_back_publisher_publishes_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.publish("OrderPlaced", {"order": 1})
        raise RuntimeError("caller failed")
    assert not Event.objects.exists()
    assert not Job.objects.exists()


def test_a_transient_delivery_failure_backs_off_60s_doubling_capped_at_5_minutes(clock):
    event = jobs.publish("OrderPlaced", {"fail": True})
    delivery = event.deliveries.get(subscriber="tests.on_order_placed")
    Job.objects.filter(delivery__subscriber="tests.audit_order").delete()

    waits = []
    for _ in range(5):
        run_next()
        delivery.job.refresh_from_db()
        waits.append((delivery.deliver_after - clock.now()).total_seconds())
        clock.advance(waits[-1])
    assert waits == [60, 120, 240, 300, 300]

    run_next()
    delivery.job.refresh_from_db()
    assert delivery.job.state == Job.State.FAILED  # max_attempts 6 spent
    assert delivery.deliver_after <= clock.now() + timedelta(seconds=0)
