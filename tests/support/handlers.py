"""Job types the test suite runs (registered in every process through
JOBS_HANDLER_MODULES, so worker subprocesses know them too)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from django.db import connection, connections, transaction
from rest_framework import serializers

import jobs
from jobs.backoff import Exponential, Fixed


class NoopPayload(jobs.ApiPayload):
    n = serializers.IntegerField(required=False)
    data = serializers.JSONField(required=False, help_text="Anything, echoed nowhere.")


@jobs.handler("tests.noop", max_attempts=3, api_payload=NoopPayload)
def noop(ctx: jobs.JobContext) -> dict[str, Any]:
    return {"echo": ctx.payload.get("n")}


@jobs.handler("tests.record", max_attempts=5)
def record(ctx: jobs.JobContext) -> None:
    """Insert a row per job into tests_hits (unique on job_id): exactly-once evidence."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, %s)", [ctx.job.pk, os.getpid()]
        )


@jobs.handler("tests.record_run", max_attempts=3)
def record_run(ctx: jobs.JobContext) -> None:
    """Append a row per run to tests_runs (job, attempt, pid; nothing unique: a second run
    of a job is a second row). Atomic, as handlers are by default: the row commits with
    the job's success or not at all, so the table holds exactly the runs that counted."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tests_runs (job_id, attempt, worker_pid) VALUES (%s, %s, %s)",
            [ctx.job.pk, ctx.attempt, os.getpid()],
        )


@jobs.handler("tests.flaky", max_attempts=4, backoff=Exponential(base=60, cap=300))
def flaky(ctx: jobs.JobContext) -> str:
    if ctx.attempt < ctx.payload.get("succeed_on", 99):
        raise jobs.TransientError(f"flaky attempt {ctx.attempt}")
    return "ok"


@jobs.handler("tests.crash", max_attempts=2, backoff=Fixed(seconds=10))
def crash(ctx: jobs.JobContext) -> None:
    raise RuntimeError("unexpected")


@jobs.handler("tests.crash_once", max_attempts=1)
def crash_once(ctx: jobs.JobContext) -> None:
    raise RuntimeError("unexpected")


@jobs.handler("tests.permanent", max_attempts=5)
def permanent(ctx: jobs.JobContext) -> None:
    raise jobs.PermanentError("bad input in row 3")


@jobs.handler("tests.poll", max_attempts=2, backoff=Fixed(seconds=1))
def poll(ctx: jobs.JobContext) -> str:
    """Snoozes until the payload's deadline has passed on the injected clock."""
    from datetime import datetime

    if ctx.now() < datetime.fromisoformat(ctx.payload["ready_at"]):
        raise jobs.Snooze(ctx.payload.get("every", 5))
    return "ready"


@jobs.handler("tests.write_then_fail", max_attempts=1)
def write_then_fail(ctx: jobs.JobContext) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, 0)", [ctx.job.pk])
    raise jobs.PermanentError("after writing")


@jobs.handler("tests.parent", max_attempts=1)
def parent(ctx: jobs.JobContext) -> None:
    for n in range(ctx.payload.get("children", 2)):
        ctx.chain("tests.noop", {"n": n})


@jobs.handler("tests.progress", max_attempts=1)
def progress(ctx: jobs.JobContext) -> int:
    total = ctx.payload.get("steps", 1000)
    for step in range(1, total + 1):
        ctx.progress(step, total, f"step {step}")
    return total


@jobs.handler("tests.keyed", max_attempts=1)
def keyed(ctx: jobs.JobContext) -> None:
    return None


@jobs.handler("tests.global_keyed", max_attempts=1, global_keys=True)
def global_keyed(ctx: jobs.JobContext) -> None:
    """Its concurrency keys are shared by every tenant (a resource they all use)."""
    return None


@jobs.handler("tests.wait_for_file", max_attempts=3, lease=2)
def wait_for_file(ctx: jobs.JobContext) -> dict[str, Any]:
    """Marks that it started, then waits (polling, bounded) for a release file: lets a
    system test kill or stop the worker while the job is known to be mid-run."""
    started = Path(ctx.payload["started"])
    started.write_text(f"{os.getpid()} {ctx.attempt}\n")
    release = Path(ctx.payload["release"])
    deadline = time.monotonic() + ctx.payload.get("max_wait", 60)
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, %s)", [ctx.job.pk, os.getpid()]
        )
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@jobs.handler(
    "tests.on_order_placed",
    subscribes=["OrderPlaced"],
    max_attempts=6,
    backoff=Exponential(base=60, factor=2, cap=300),
)
def on_order_placed(ctx: jobs.JobContext) -> None:
    if ctx.payload["payload"].get("fail"):
        raise jobs.TransientError("cluster busy")


@jobs.handler("tests.on_crashing", subscribes=["Crashing"], max_attempts=2)
def on_crashing(ctx: jobs.JobContext) -> None:
    raise RuntimeError("unexpected")


@jobs.handler("tests.audit_order", subscribes=["OrderPlaced"])
def audit_order(ctx: jobs.JobContext) -> None:
    return None


@jobs.handler("tests.slow_progress", max_attempts=1)
def slow_progress(ctx: jobs.JobContext) -> int:
    """Reports a step every ``every`` seconds: progress spread over time, for the streams."""
    total = ctx.payload.get("steps", 10)
    for step in range(1, total + 1):
        time.sleep(ctx.payload.get("every", 0.1))
        ctx.progress(step, total, f"step {step}")
    return total


@jobs.handler("tests.fail_unless_file", max_attempts=1)
def fail_unless_file(ctx: jobs.JobContext) -> str:
    """Fails for good while the payload's flag file is missing: a browser test watches it
    fail, creates the file, and retries it from the pipeline page."""
    ctx.progress(1, 2, "looking for the flag file")
    if not Path(ctx.payload["flag"]).exists():
        raise jobs.PermanentError(f"flag file {ctx.payload['flag']} is missing")
    ctx.progress(2, 2, "flag file found")
    return "ok"


@jobs.handler("tests.overrun", max_attempts=2, timeout=0.3, backoff=Fixed(seconds=60))
def overrun(ctx: jobs.JobContext) -> str:
    """Keeps working (in Python) far past its 0.3 s limit."""
    deadline = time.monotonic() + ctx.payload.get("for", 30)
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return "finished"


@jobs.handler("tests.overrun_swallowing", max_attempts=1, timeout=0.3)
def overrun_swallowing(ctx: jobs.JobContext) -> str:
    """Catches the interruption and returns as if all was well."""
    try:
        while True:
            time.sleep(0.01)
    except BaseException:
        return "pretended to finish"


@jobs.handler("tests.blocked", max_attempts=1, timeout=0.3)
def blocked(ctx: jobs.JobContext) -> str:
    """Blocks in one C call (a sleep) that no Python exception can cut short."""
    Path(ctx.payload["started"]).write_text(str(os.getpid()))
    time.sleep(ctx.payload.get("for", 30))
    return "woke up"


@jobs.handler("tests.fast_or_blocked", max_attempts=2, timeout=0.3, backoff=Fixed(seconds=0))
def fast_or_blocked(ctx: jobs.JobContext) -> str:
    """Fast, so that the worker groups it with other fast jobs; with ``block``, its first
    attempt then blocks in one C call inside that group's transaction."""
    if ctx.payload.get("block") and ctx.attempt == 1:
        Path(ctx.payload["started"]).write_text(str(os.getpid()))
        time.sleep(60)
    return "done"


@jobs.handler("tests.fast_or_pausing", max_attempts=3, backoff=Fixed(seconds=0))
def fast_or_pausing(ctx: jobs.JobContext) -> str:
    """Fast, so that the worker groups it with other fast jobs; with ``pause``, it marks
    that it started and then pauses inside its group's transaction (in short sleeps, so
    that its time limit can interrupt it)."""
    if ctx.payload.get("pause") and ctx.attempt == 1:
        Path(ctx.payload["started"]).write_text(str(os.getpid()))
        until = time.monotonic() + ctx.payload["pause"]
        while time.monotonic() < until:
            time.sleep(0.02)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            [ctx.job.pk, os.getpid()],
        )
    return "done"


@jobs.handler("tests.timed", max_attempts=5)
def timed(ctx: jobs.JobContext) -> dict[str, Any]:
    """Notes each attempt's start (a file per job and attempt under the payload's
    ``starts`` directory, holding the pid and the time), sleeps ``seconds``, then inserts
    its hit: a system test sees which attempts started when, even those whose result was
    refused."""
    Path(ctx.payload["starts"], f"{ctx.job.pk}.{ctx.attempt}").write_text(f"{os.getpid()} {time.time()}\n")
    time.sleep(ctx.payload.get("seconds", 0))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, %s)", [ctx.job.pk, os.getpid()]
        )
    return {"pid": os.getpid()}


@jobs.handler("tests.exit_engine", max_attempts=3)
def exit_engine(ctx: jobs.JobContext) -> dict[str, Any]:
    """Calls ``sys.exit`` the first time it runs (its marker file is missing), which ends
    the engine thread that runs it, as a fatal error would; later runs succeed."""
    marker = Path(ctx.payload["marker"])
    if not marker.exists():
        marker.write_text(f"{os.getpid()}\n")
        sys.exit(3)
    return {"pid": os.getpid()}


@jobs.handler("tests.gather", max_attempts=1)
def gather(ctx: jobs.JobContext) -> dict[str, Any]:
    """A fan-in: reports the outcome of each job it waited on."""
    return {"seen": [[p.id, p.state, p.succeeded] for p in ctx.prerequisites()]}


@jobs.handler("tests.fenced_batches", atomic=False, max_attempts=2)
def fenced_batches(ctx: jobs.JobContext) -> int:
    """Writes one tests_hits row per batch, each batch fenced by the job's lease; the
    payload's ``rescue_before`` names the batch before which the job's lease is taken
    from it (as the reaper would, from another connection)."""
    written = 0
    for n in range(ctx.payload.get("batches", 3)):
        with ctx.batch():
            if n == ctx.payload.get("rescue_before"):
                _take_lease(ctx.job.pk)
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO tests_hits (job_id, worker_pid) VALUES (%s, %s)",
                    [ctx.job.pk * 100 + n, os.getpid()],
                )
        written += 1
    return written


def _take_lease(job_id: int) -> None:
    """Give the job a new lease token from a connection of its own, committed at once."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("UPDATE jobs_job SET lease_token = gen_random_uuid() WHERE id = %s", [job_id])
    finally:
        other.close()


@jobs.handler("tests.hand_back_and_wait", atomic=False, max_attempts=2, lease=2)
def hand_back_and_wait(ctx: jobs.JobContext) -> dict[str, Any]:
    """Hands back the jobs claimed with it (inside a transaction of its own with
    ``in_transaction``), notes what it then sees of every other job (id, state, attempts,
    latest history kind), marks that it started and waits, bounded, for the payload's
    release file: a handler about to wait for minutes on a local process."""
    from jobs.models import Job, JobEvent

    if ctx.payload.get("in_transaction"):
        with transaction.atomic():
            handed_back = ctx.hand_back_others()
    else:
        handed_back = ctx.hand_back_others()
    others = [
        [
            pk,
            state,
            attempts,
            JobEvent.objects.filter(job_id=pk).order_by("-id").values_list("kind", flat=True).first(),
        ]
        for pk, state, attempts in Job.objects.exclude(pk=ctx.job.pk)
        .order_by("pk")
        .values_list("pk", "state", "attempts")
    ]
    if "started" in ctx.payload:
        Path(ctx.payload["started"]).write_text(f"{os.getpid()} {ctx.attempt}\n")
    if "release" in ctx.payload:
        release = Path(ctx.payload["release"])
        deadline = time.monotonic() + ctx.payload.get("max_wait", 60)
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"handed_back": handed_back, "others": others}


@jobs.handler("tests.atomic_hand_back", max_attempts=1)
def atomic_hand_back(ctx: jobs.JobContext) -> int:
    """An atomic handler trying to hand back its batch: refused."""
    return ctx.hand_back_others()


@jobs.handler("tests.wait_for_probe", max_attempts=2)
def wait_for_probe(ctx: jobs.JobContext) -> str:
    """Waits, snoozing on the payload's wake key, until a ``tests.probe`` of that key has
    succeeded: a delivery held back while its circuit breaker is open."""
    from jobs.models import Job

    key = ctx.payload["key"]
    if not Job.objects.filter(type="tests.probe", state="succeeded", payload__key=key).exists():
        raise jobs.Snooze(ctx.payload.get("seconds", 300), "breaker open", wake_on=key)
    return "delivered"


@jobs.handler("tests.probe", max_attempts=1)
def probe(ctx: jobs.JobContext) -> int:
    """Closes the breaker of its key: wakes what waits on it, with its own success."""
    return jobs.wake(ctx.payload["key"])


# Run by remote workers (jobs.remote): the cluster's workers never claim it.
jobs.remote_handler(
    "tests.remote_render",
    queue="remote-tests",
    max_attempts=2,
    lease=6,
    timeout=60,
    backoff=Fixed(seconds=30),
)


# A remote type whose own rows the engine keeps in step (jobs.RemoteHooks): here a list
# of what each hook saw, and a result or a snooze that the type refuses.
REMOTE_HOOK_CALLS: list[tuple[str, int, object]] = []


def _describe(job) -> dict:
    if job.payload.get("gone"):
        raise LookupError(f"page {job.payload['page']} was deleted")
    REMOTE_HOOK_CALLS.append(("describe", job.pk, None))
    return {"page": job.payload.get("page"), "format": "png"}


def _on_complete(job, result) -> None:
    if result and result.get("pixels", 0) < 0:
        raise jobs.InvalidArgument("result", "result: pixels are never negative")
    REMOTE_HOOK_CALLS.append(("complete", job.pk, result))


def _on_fail(job, error: str, final: bool) -> None:
    REMOTE_HOOK_CALLS.append(("fail", job.pk, final))


def _on_snooze(job, details: dict) -> float | None:
    REMOTE_HOOK_CALLS.append(("snooze", job.pk, details))
    polls = details.get("polls")
    return None if polls is None else [2, 3, 5, 8][min(polls, 3)]


def _on_operator(job, action: str, actor, via: str) -> None:
    REMOTE_HOOK_CALLS.append(("operator", job.pk, (action, job.state)))


def _on_release(job) -> None:
    REMOTE_HOOK_CALLS.append(("release", job.pk, job.state))


def _time_limit(job) -> float | None:
    return job.payload.get("limit")


jobs.remote_handler(
    "tests.remote_hooked",
    queue="remote-tests",
    max_attempts=1,
    lease=6,
    timeout=60,
    hooks=jobs.RemoteHooks(
        describe=_describe,
        on_complete=_on_complete,
        on_fail=_on_fail,
        on_snooze=_on_snooze,
        on_release=_on_release,
        on_operator=_on_operator,
        time_limit=_time_limit,
    ),
)
