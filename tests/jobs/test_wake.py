"""Keyed wake-ups: a job snoozed on a key (``Snooze(..., wake_on=key)``) runs as soon as
``jobs.wake(key)`` says its condition changed, not a whole snooze later."""

from __future__ import annotations

import time

import pytest
from django.db import transaction
from django.urls import reverse

import jobs
from jobs import engine
from jobs.models import Job, JobEvent
from jobs.testing import wait_until
from jobs.worker import run_until_idle
from tests.jobs.test_worker import running_worker, state_of  # noqa: F401 (a fixture)
from tests.support.base import claim_one, make_job

BREAKER = "breaker:acme:api.example.com"


def asleep(key: str = BREAKER, **payload) -> Job:
    """A job that ran once and now snoozes on ``key`` (300 s unless told)."""
    job = make_job("tests.wait_for_probe", {"key": key, **payload})
    run_until_idle()
    job.refresh_from_db()
    assert (job.state, job.attempts, job.wake_key) == (Job.State.PENDING, 0, key)
    return job


@pytest.mark.django_db
def test_a_probe_that_closes_the_breaker_wakes_the_job_waiting_on_it(clock):
    waiting = asleep()
    assert "(or until 'breaker:acme:api.example.com' is woken)" in waiting.events.last().message
    assert run_until_idle() == 0  # asleep, and the clock stands still
    assert jobs.explain(waiting) == (
        f"waiting for run_after (snoozed): due in 5\xa0minutes, or as soon as {BREAKER!r} is woken"
    )

    probe = make_job("tests.probe", {"key": BREAKER})
    assert run_until_idle() == 2  # the probe, then in the next batch the job it woke

    probe.refresh_from_db()
    waiting.refresh_from_db()
    assert probe.result == 1
    assert (waiting.state, waiting.result, waiting.attempts) == (Job.State.SUCCEEDED, "delivered", 1)
    woken = waiting.events.get(kind=JobEvent.Kind.WOKEN)
    assert (woken.at, woken.attempt, woken.from_status, woken.to_status) == (
        clock.now(),
        1,
        Job.State.PENDING,
        Job.State.PENDING,
    )
    assert woken.message == f"woken by {BREAKER!r}"
    assert waiting.wake_key is None


@pytest.mark.django_db
def test_wake_touches_only_the_jobs_asleep_on_its_key(clock):
    mine, other = asleep(), asleep("breaker:globex:api.example.com")
    plain = make_job("tests.poll", {"ready_at": "2999-01-01T00:00:00+00:00", "every": 300})
    run_until_idle()  # snoozes without a key
    untouched = set(Job.objects.exclude(pk=mine.pk).values_list("pk", "run_after", "wake_key"))

    assert jobs.wake(BREAKER) == 1

    assert set(Job.objects.exclude(pk=mine.pk).values_list("pk", "run_after", "wake_key")) == untouched
    assert {other.pk, plain.pk} == {pk for pk, _, _ in untouched}
    assert {key for _, _, key in untouched} == {"breaker:globex:api.example.com", None}
    mine.refresh_from_db()
    assert (mine.run_after, mine.wake_key) == (clock.now(), None)
    assert jobs.wake(BREAKER) == 0  # woken once: due now, nothing left asleep
    assert jobs.wake("breaker:nobody") == 0
    assert JobEvent.objects.filter(kind=JobEvent.Kind.WOKEN).count() == 1


@pytest.mark.django_db
def test_a_job_claimed_after_its_snooze_is_not_woken_and_keeps_no_key(clock):
    job = asleep()
    clock.advance(301)  # its snooze is over
    claimed, batch = claim_one()
    assert claimed.pk == job.pk and claimed.wake_key is None  # the claim cleared it

    assert jobs.wake(BREAKER) == 0

    job.refresh_from_db()
    assert (job.state, job.lease_token) == (Job.State.RUNNING, batch.token)
    # Its next outcome, a retry after a backoff, is not cut short by a later wake.
    engine.fail(job, batch.token, "boom")
    assert jobs.wake(BREAKER) == 0
    assert Job.objects.get(pk=job.pk).run_after > clock.now()


@pytest.mark.django_db
def test_snoozing_without_a_key_forgets_the_earlier_one(clock):
    job = asleep()
    clock.advance(301)
    claimed, batch = claim_one()
    engine.start([claimed], batch.token)
    engine.snooze(claimed, batch.token, 60)

    assert jobs.wake(BREAKER) == 0
    assert Job.objects.get(pk=job.pk).wake_key is None


@pytest.mark.django_db
def test_an_operator_action_on_a_sleeping_job_clears_its_key(clock):
    job = asleep()
    engine.cancel(job)
    assert Job.objects.get(pk=job.pk).wake_key is None
    assert jobs.wake(BREAKER) == 0


@pytest.mark.django_db(transaction=True)
def test_a_wake_takes_effect_when_its_transaction_commits(clock):
    job = asleep()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert jobs.wake(BREAKER) == 1
        raise RuntimeError("the caller's transaction rolls back")
    assert Job.objects.get(pk=job.pk).wake_key == BREAKER  # still asleep
    assert not JobEvent.objects.filter(kind=JobEvent.Kind.WOKEN).exists()


@pytest.mark.django_db(transaction=True)
def test_a_wake_signals_the_idle_workers(clock, running_worker):  # noqa: F811
    # Cleared before the job exists: once the job has snoozed, the worker finds nothing
    # due and sets it again as it goes back to its LISTEN wait (a 30 s poll). Cleared
    # after, it could erase a signal the worker had just given, and never give another.
    running_worker.idle.clear()
    job = make_job("tests.wait_for_probe", {"key": BREAKER})
    wait_until(
        lambda: Job.objects.filter(pk=job.pk, wake_key=BREAKER).exists(), timeout=10, what="the job to snooze"
    )
    assert running_worker.idle.wait(10)

    started = time.monotonic()
    assert jobs.wake(BREAKER) == 1
    # It runs again at once (and, its breaker still open, snoozes again).
    wait_until(
        lambda: list(job.events.values_list("kind", flat=True))[-3:] == ["woken", "claimed", "snoozed"],
        timeout=5,
        what="the woken job to run",
    )
    assert time.monotonic() - started < 5
    assert state_of(job) == Job.State.PENDING


@pytest.mark.parametrize("key", ["", "two words", "x" * 201, "caf\u00e9", "tab\t", 7, b"bytes"])
def test_a_wake_key_that_is_not_short_printable_ascii_is_refused(key):
    with pytest.raises(jobs.InvalidArgument, match="^wake_on must be 1 to 200 printable") as refused:
        jobs.Snooze(60, wake_on=key)
    assert refused.value.argument == "wake_on"
    with pytest.raises(jobs.InvalidArgument, match="^key must be"):
        engine.wake(key)


def test_no_key_is_no_wake_key_for_a_snooze_but_refused_by_wake():
    assert jobs.Snooze(60).wake_on is None
    assert jobs.Snooze(60, wake_on="x" * 200).wake_on == "x" * 200
    with pytest.raises(jobs.InvalidArgument, match="^key must be .* got None"):
        jobs.wake(None)  # type: ignore[arg-type]


@pytest.mark.django_db
def test_the_console_and_the_api_show_the_wake_in_the_history(clock, admin_client, olga):
    job = asleep()
    jobs.wake(BREAKER)

    page = admin_client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert '<tr class="history-row" data-kind="woken">' in page
    assert "Woken from its snooze" in page and "woken by &#x27;breaker:acme:api.example.com&#x27;" in page
    history = olga.get(f"/api/jobs/{job.pk}/").json()["history"]
    assert [event["kind"] for event in history][-2:] == ["snoozed", "woken"]
