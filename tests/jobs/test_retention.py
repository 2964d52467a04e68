from __future__ import annotations

from datetime import timedelta

import pytest

from jobs import retention
from jobs.models import Job
from tests.base import make_job, run_next

pytestmark = pytest.mark.django_db


def test_finished_jobs_are_pruned_per_state_and_failures_are_kept_longer(clock):
    ok = make_job("tests.noop")
    run_next()
    failed = make_job("tests.permanent")
    run_next()
    pending = make_job("tests.noop", run_after=clock.now() + timedelta(days=60))

    clock.advance(timedelta(days=8).total_seconds())
    assert retention.prune() == {"succeeded": 1, "cancelled": 0, "failed": 0}
    assert not Job.objects.filter(pk=ok.pk).exists()
    assert Job.objects.filter(pk=failed.pk).exists()

    clock.advance(timedelta(days=30).total_seconds())
    assert retention.prune()["failed"] == 1
    assert Job.objects.filter(pk=pending.pk).exists()  # unfinished jobs are never pruned


def test_pruning_an_unfinished_state_is_refused():
    with pytest.raises(ValueError, match="only finished states"):
        retention.prune(older_than={"pending": timedelta(days=1)})
