from __future__ import annotations

from datetime import timedelta

import pytest
from channels_postgres.models import GroupChannel, Message
from django.utils import timezone

import jobs
from jobs import retention
from jobs.models import Delivery, Event, Job, JobEvent
from tests.support.base import make_job, run_next

pytestmark = pytest.mark.django_db

MODELS = [Job, JobEvent, Delivery, Event, Message, GroupChannel]


def row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in MODELS}


def test_finished_jobs_are_pruned_per_state_and_failures_are_kept_longer(clock):
    ok = make_job("tests.noop")
    run_next()
    failed = make_job("tests.permanent")
    run_next()
    pending = make_job("tests.noop", run_after=clock.now() + timedelta(days=60))

    clock.advance(timedelta(days=8).total_seconds())
    assert retention.prune().jobs == {"succeeded": 1, "cancelled": 0, "failed": 0}
    assert not Job.objects.filter(pk=ok.pk).exists()
    assert Job.objects.filter(pk=failed.pk).exists()

    clock.advance(timedelta(days=30).total_seconds())
    assert retention.prune().jobs["failed"] == 1
    assert Job.objects.filter(pk=pending.pk).exists()  # unfinished jobs are never pruned


def test_pruning_an_unfinished_state_is_refused():
    with pytest.raises(ValueError, match="only finished states"):
        retention.prune(older_than={"pending": timedelta(days=1)})


def test_a_dry_run_reports_exactly_what_the_prune_then_deletes_and_deletes_nothing(clock):
    make_job("tests.noop")
    run_next()
    jobs.publish("OrderPlaced", {"order": 1})  # two deliveries, each a job
    run_next()
    run_next()
    jobs.publish("NobodyListens", {})
    now = timezone.now()
    Message.objects.create(channel="a", message=b"old", expire=now - timedelta(seconds=1))
    GroupChannel.objects.create(group_key="g", channel="crashed", expire=now - timedelta(seconds=1))
    clock.advance(timedelta(days=8).total_seconds())
    history = JobEvent.objects.count()
    before = row_counts()

    dry = retention.prune(dry_run=True)

    assert row_counts() == before
    assert retention.prune() == dry
    assert dry.jobs == {"succeeded": 3, "cancelled": 0, "failed": 0}
    assert dry.rows == {
        "jobs.Job": 3,
        "jobs.JobEvent": history,
        "jobs.Delivery": 2,
        "jobs.Event": 2,
        "channels_postgres.Message": 1,
        "channels_postgres.GroupChannel": 1,
    }
    assert row_counts() == dict.fromkeys(before, 0)
