from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError

import jobs
from jobs import engine, reaper
from jobs.models import Event, Job, JobEvent, Worker
from tests.support.base import claim_one, granted, make_job, run_next, staff, tenant
from tests.support.jobs.builders import run_command

pytestmark = pytest.mark.django_db


def failed_job(name: str = "tests.permanent", **options) -> Job:
    job = make_job(name, **options)
    assert run_next() == "failed"
    job.refresh_from_db()
    return job


def row(out: str, first: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(first + " "))


# --- jobs_status ---------------------------------------------------------------------


def test_status_counts_jobs_per_type_and_state(clock):
    failed_job()
    make_job("tests.noop")
    make_job("tests.noop")

    lines = run_command("jobs_status").splitlines()

    header = next(line for line in lines if line.startswith("type"))
    assert header.split() == ["type", "pending", "running", "succeeded", "failed", "cancelled", "total"]
    assert next(line for line in lines if line.startswith("tests.noop")).split() == [
        "tests.noop",
        "2",
        "0",
        "0",
        "0",
        "0",
        "2",
    ]
    assert next(line for line in lines if line.startswith("tests.permanent")).split() == [
        "tests.permanent",
        "0",
        "0",
        "0",
        "1",
        "0",
        "1",
    ]
    assert next(line for line in lines if line.startswith("(all)")).split()[-1] == "3"


def test_status_shows_the_oldest_due_pending_job_per_queue(clock):
    make_job("tests.noop")
    clock.advance(90)
    make_job("tests.noop")
    make_job("tests.noop", run_after=clock.now() + timedelta(hours=1))  # not due yet

    out = run_command("jobs_status")

    row = next(line for line in out.splitlines() if line.startswith("default"))
    assert row.split() == ["default", "2", "2026-11-02", "09:00:00", "1m", "30s"]


def test_status_lists_live_workers_only(clock):
    now = clock.now()
    Worker.objects.create(
        name="host:1:abc", hostname="host", pid=1, started_at=now, last_seen_at=now, jobs_done=12
    )
    Worker.objects.create(
        name="host:2:dead", hostname="host", pid=2, started_at=now, last_seen_at=now - timedelta(minutes=5)
    )

    out = run_command("jobs_status")

    assert "host:1:abc" in out
    assert "host:2:dead" not in out


def test_status_says_when_no_worker_is_alive(clock):
    assert "no live worker" in run_command("jobs_status")


def rescued(clock, job: Job, times: int = 1) -> Job:
    """Each time, the only due job is claimed by a worker that dies and the reaper takes it back."""
    for _ in range(times):
        claim_one("dead-worker")
        clock.advance(7)
        assert reaper.rescue_expired().rescued == 1
    job.refresh_from_db()
    return job


def test_status_counts_rescues_in_the_last_hour_and_day_and_names_the_jobs_rescued_most(clock):
    engine.cancel(rescued(clock, make_job("tests.noop")))
    clock.advance(timedelta(days=2).total_seconds())  # out of the window
    often = rescued(clock, make_job("tests.noop", max_attempts=5), times=2)
    engine.cancel(often)
    clock.advance(timedelta(hours=2).total_seconds())
    once = rescued(clock, make_job("tests.noop"))

    out = run_command("jobs_status")

    assert row(out, "last hour") == ["last", "hour", "1", "1"]
    assert row(out, "last day") == ["last", "day", "3", "2"]
    lines = out.splitlines()
    most = lines.index("Rescued most in the last day:")
    assert lines[most + 1].split()[:5] == ["job", "type", "state", "rescues", "(day)"]
    assert lines[most + 2].split()[:5] == [str(often.pk), "tests.noop", "cancelled", "2", "2"]
    assert lines[most + 3].split()[:5] == [str(once.pk), "tests.noop", "pending", "1", "1"]
    assert lines[most + 4] == "Live workers"  # the other job's rescue is two days old


def test_status_says_when_nothing_was_rescued_in_the_last_day(clock):
    assert "(no rescues in the last day)" in run_command("jobs_status")


# --- jobs_recover_stale ----------------------------------------------------------------


def test_recover_stale_rescues_expired_leases_and_says_which(clock):
    job = make_job("tests.noop")
    claim_one("dead-worker")
    clock.advance(7)

    out = run_command("jobs_recover_stale")

    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.events.filter(kind=JobEvent.Kind.RESCUED).exists()
    assert f"{job.pk}  tests.noop  pending" in out
    assert "Rescued 1 job(s)" in out


def test_recover_stale_leaves_live_leases_alone(clock):
    job = make_job("tests.noop")
    claim_one()
    clock.advance(3)

    assert "Rescued 0 job(s)" in run_command("jobs_recover_stale")
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING


def test_recover_stale_wakes_each_queue_with_due_jobs_once(clock):
    for _ in range(3):
        make_job("tests.noop")
    make_job("tests.noop", queue="maintenance")
    make_job("tests.noop", queue="later", run_after=clock.now() + timedelta(minutes=5))

    assert "woke 2 queue(s)" in run_command("jobs_recover_stale")


# --- jobs_retry_failed -----------------------------------------------------------------


def test_retry_failed_by_type_retries_only_that_types_failures(clock):
    mine = failed_job("tests.permanent")
    other = failed_job("tests.write_then_fail")

    out = run_command("jobs_retry_failed", "--type", "tests.permanent")

    mine.refresh_from_db()
    other.refresh_from_db()
    assert (mine.state, mine.attempts) == (Job.State.PENDING, 0)
    assert other.state == Job.State.FAILED
    assert f"Retried 1 job(s): {mine.pk}" in out


def test_retry_failed_by_id_records_the_user(clock):
    alice = granted(staff("alice", operator=True), "jobs.operate_job")
    job = failed_job()

    run_command("jobs_retry_failed", "--id", str(job.pk), "--user", "alice")

    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.events.get(kind=JobEvent.Kind.RETRIED).actor == alice


def test_retry_failed_since_skips_older_failures(clock):
    old = failed_job()
    clock.advance(3 * 3600)
    recent = failed_job()

    run_command("jobs_retry_failed", "--type", "tests.permanent", "--since", "2h")

    old.refresh_from_db()
    recent.refresh_from_db()
    assert (old.state, recent.state) == (Job.State.FAILED, Job.State.PENDING)


def test_retry_failed_dry_run_changes_nothing(clock):
    job = failed_job()

    out = run_command("jobs_retry_failed", "--type", "tests.permanent", "--dry-run")

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert f"Would retry 1 job(s): {job.pk}" in out


def test_retry_failed_names_an_unknown_type(clock):
    with pytest.raises(CommandError, match="unknown job type 'tests.nope'"):
        run_command("jobs_retry_failed", "--type", "tests.nope")


def test_retry_failed_refuses_an_unknown_user(clock):
    job = failed_job()
    with pytest.raises(CommandError, match="no user named 'mallory'"):
        run_command("jobs_retry_failed", "--id", str(job.pk), "--user", "mallory")
    job.refresh_from_db()
    assert job.state == Job.State.FAILED


@pytest.mark.parametrize(
    "build",
    [
        lambda: staff("bob"),  # staff, without the permission
        lambda: granted(staff("bob", is_staff=False), "jobs.operate_job"),  # the permission, not staff
        lambda: granted(staff("bob"), "jobs.operate_delivery"),  # another model's
    ],
)
def test_retry_failed_refuses_a_user_who_may_not_operate_jobs_and_retries_nothing(clock, build):
    build()
    job = failed_job()

    for selection in (["--id", str(job.pk)], ["--type", "tests.permanent", "--dry-run"]):
        with pytest.raises(
            CommandError, match=r"'bob' may not do this: it needs staff granted jobs\.operate_job"
        ):
            run_command("jobs_retry_failed", *selection, "--user", "bob")

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert not job.events.filter(kind=JobEvent.Kind.RETRIED).exists()


def test_retry_failed_refuses_ids_that_are_missing_or_not_failed(clock):
    failed = failed_job()
    running = make_job("tests.noop")
    claim_one()

    with pytest.raises(CommandError, match=r"no job with id 999999"):
        run_command("jobs_retry_failed", "--id", str(failed.pk), "999999")
    with pytest.raises(CommandError, match=rf"not {running.pk} \(running\)"):
        run_command("jobs_retry_failed", "--id", str(failed.pk), str(running.pk))
    failed.refresh_from_db()
    assert failed.state == Job.State.FAILED


def test_retry_failed_needs_a_type_or_ids(clock):
    with pytest.raises(CommandError, match="--type NAME and/or --id"):
        run_command("jobs_retry_failed")


def test_retry_failed_rejects_a_bad_since(clock):
    with pytest.raises(CommandError, match="neither a duration"):
        run_command("jobs_retry_failed", "--type", "tests.permanent", "--since", "yesterday")


# --- jobs_prune ------------------------------------------------------------------------


def as_done(dry_run_out: str) -> list[list[str]]:
    """A dry run's report in the words of the real prune's (column widths aside)."""
    said = dry_run_out.replace("would delete", "deleted").replace("Would delete", "Deleted")
    return [line.split() for line in said.splitlines()]


def test_prune_dry_run_reports_what_the_prune_then_deletes_and_deletes_nothing(clock):
    job = make_job("tests.noop")
    run_next()
    jobs.publish("NobodyListens", {})
    clock.advance(timedelta(days=8).total_seconds())
    history = JobEvent.objects.filter(job=job).count()

    dry = run_command("jobs_prune", "--dry-run")

    assert Job.objects.filter(pk=job.pk).exists() and Event.objects.exists()
    assert row(dry, "succeeded")[-1] == "1"
    assert row(dry, "jobs.JobEvent")[-1] == str(history) and row(dry, "jobs.Event")[-1] == "1"
    assert f"Would delete 1 finished job(s); {history + 2} row(s) in all." in dry
    assert [line.split() for line in run_command("jobs_prune").splitlines()] == as_done(dry)
    assert not Job.objects.exists() and not Event.objects.exists()


def test_prune_deletes_finished_jobs_past_retention(clock):
    old = make_job("tests.noop")
    run_next()
    clock.advance(timedelta(days=8).total_seconds())
    fresh = make_job("tests.noop")
    run_next()

    out = run_command("jobs_prune")

    assert not Job.objects.filter(pk=old.pk).exists()
    assert Job.objects.filter(pk=fresh.pk).exists()
    assert "Deleted 1 finished job(s); " in out


# --- jobs_worker -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_worker_drains_due_jobs_and_exits_when_idle(hits_table):
    jobs = [make_job("tests.record") for _ in range(30)]
    make_job("tests.record", queue="other")

    out = run_command(
        "jobs_worker", "--exit-when-idle", "--queues", "default", "--batch-size", "7", "--concurrency", "2"
    )

    states = set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True))
    assert states == {Job.State.SUCCEEDED}
    assert Job.objects.get(queue="other").state == Job.State.PENDING
    assert not Worker.objects.exists()  # unregistered on the way out
    assert "Stopped after 30 job(s)." in out


@pytest.mark.parametrize("option", ["--batch-size", "--concurrency"])
def test_worker_rejects_a_non_positive_number(option):
    with pytest.raises(CommandError, match="must be at least 1"):
        run_command("jobs_worker", option, "0", "--exit-when-idle")


def test_worker_fails_loudly_when_a_worker_ends_with_an_error(monkeypatch):
    def broken(self, **options):
        raise RuntimeError("a bug")

    monkeypatch.setattr("jobs.worker.EngineWorker.run", broken)
    with pytest.raises(CommandError, match="failed: RuntimeError: a bug"):
        run_command("jobs_worker", "--exit-when-idle")


def test_a_tenants_staff_retry_their_tenants_jobs_only(clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    granted(staff("carl", of=acme), "jobs.operate_job")
    mine, theirs = failed_job(tenant=acme), failed_job(tenant=globex)

    with pytest.raises(CommandError, match=f"no job with id {theirs.pk}"):
        run_command("jobs_retry_failed", "--id", str(theirs.pk), "--user", "carl")
    out = run_command("jobs_retry_failed", "--type", "tests.permanent", "--user", "carl")

    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.state, theirs.state) == (Job.State.PENDING, Job.State.FAILED)
    assert f"Retried 1 job(s): {mine.pk}" in out
