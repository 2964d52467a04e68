"""``ingest_start`` and ``ingest_status``: a run started (and seen through) from the
command line, recorded as the command's; the runs and one run's batches as tables."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ingest.runs import services
from ingest.runs.models import ActionKind, IngestRun, RunStatus
from tests.support.base import granted, staff
from tests.support.ingest import builders
from tests.support.ingest.running import drain

pytestmark = pytest.mark.django_db


def command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as error:
        command(*args)
    assert error.value.returncode == 1  # the process exits non-zero
    return error.value


# --- ingest_start -------------------------------------------------------------------------------


def test_start_and_wait_runs_the_pipeline_here_and_prints_its_outcome(acme, clock):
    olga = granted(staff("olga", operator=True), "ingest.operate_ingestrun")
    builders.source(acme, batches=3, size=2)

    output = command("ingest_start", "orders", "--wait", "--user", "olga")

    run = IngestRun.objects.get()
    assert run.status == RunStatus.SUCCEEDED
    assert f"Started run {run.pk} of orders (acme), pipeline {run.pipeline}" in output
    assert "  batch 1: 2 record(s), published\n  batch 2:" in output
    assert output.strip().endswith(
        f"run {run.pk} of orders (acme): succeeded, 3 of 3 batch(es) "
        "published, 6 record(s), 0 hook failure(s)"
    )
    action = run.actions.get(kind=ActionKind.STARTED)
    assert (action.actor, action.via) == (olga, "command")


def test_start_without_wait_leaves_the_run_to_the_workers(acme):
    builders.source(acme)

    output = command("ingest_start", "orders")

    run = IngestRun.objects.get()
    assert run.status == RunStatus.RUNNING
    assert f"Follow it: manage.py ingest_status {run.pk}" in output


def test_a_run_that_fails_while_waited_on_exits_non_zero_saying_why(acme, clock):
    builders.source(acme, batches=2, hooks=[builders.exit_with(4, "missing column")], max_failures=1)

    error = refused("ingest_start", "orders", "--wait")

    run = IngestRun.objects.get()
    assert str(error) == (
        f"run {run.pk} of orders (acme): failed, 0 of {run.batches_ingested} "
        "batch(es) published, "
        f"0 record(s), 1 hook failure(s); {run.failure_reason}"
    )
    assert "1 hook failure reached the run's limit of 1" in str(error)


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "unknown source 'nope'"),
        (["orders", "--tenant", "globex"], "unknown source 'orders' of tenant 'globex'"),
        (["orders", "--tenant", "initech"], "no tenant 'initech'"),
        (["orders", "--user", "nobody"], "no user named 'nobody'"),
    ],
)
def test_an_unknown_source_tenant_or_user_is_named(acme, globex, args, message):
    builders.source(acme)

    assert str(refused("ingest_start", *args)) == message
    assert not IngestRun.objects.exists()


def test_a_user_without_the_operate_permission_is_refused_and_no_run_starts(acme):
    builders.source(acme)
    staff("bob", of=acme)

    assert str(refused("ingest_start", "orders", "--user", "bob")) == (
        "'bob' may not do this: it needs staff granted ingest.operate_ingestrun"
    )
    assert not IngestRun.objects.exists()


def test_a_tenants_staff_may_not_start_another_tenants_source(acme, globex):
    builders.source(globex)
    granted(staff("carl", of=acme), "ingest.operate_ingestrun")

    assert str(refused("ingest_start", "orders", "--user", "carl")) == (
        "'carl' may not act on source 'orders': it is not their tenant's"
    )
    assert not IngestRun.objects.exists()


def test_a_name_several_tenants_have_needs_the_tenant(acme, globex):
    builders.source(acme)
    builders.source(globex)

    error = refused("ingest_start", "orders")
    command("ingest_start", "orders", "--tenant", "globex")

    assert "several tenants have a source named 'orders' (acme, globex): name one with --tenant" in str(error)
    assert IngestRun.objects.get().tenant == globex


def test_a_refused_start_says_why(acme):
    source = builders.source(acme)
    running = services.start_ingest(source)

    error = refused("ingest_start", "orders")

    assert str(error) == f"not started: source 'orders' already has run {running.pk} running"
    source.enabled = False
    source.save()
    services.cancel_run(running)
    assert str(refused("ingest_start", "orders")) == "not started: source 'orders' is disabled"


# --- ingest_status ------------------------------------------------------------------------------


def test_status_lists_the_recent_runs(acme, globex, clock):
    first = services.start_ingest(builders.source(acme, "orders", batches=1), actor=staff("alice", of=acme))
    drain(clock)
    second = services.start_ingest(builders.source(globex, "invoices"))

    everything = command("ingest_status")
    acmes = command("ingest_status", "--tenant", "acme")
    newest = command("ingest_status", "--limit", "1")

    header, *rows = everything.splitlines()
    assert header.split() == [
        "run",
        "tenant",
        "source",
        "status",
        "batches",
        "records",
        "hook",
        "failures",
        "started",
        "finished",
        "by",
    ]
    assert rows[0].split()[:6] == [str(second.pk), "globex", "invoices", "running", "0/0", "0"]
    assert rows[1].split()[:6] == [str(first.pk), "acme", "orders", "succeeded", "1/1", "2"]
    assert rows[1].split()[-1] == "alice"
    assert "invoices" not in acmes and "orders" in acmes
    assert len(newest.splitlines()) == 2
    assert command("ingest_status", "--tenant", "globex", "--limit", "5").count("\n") == 2


def test_status_of_one_run_shows_its_batches_and_hook_executions(acme, clock):
    source = builders.source(
        acme, batches=2, hooks=[builders.PASS, builders.exit_with(3, "bad")], max_failures=5
    )
    run = services.start_ingest(source, via="api")
    drain(clock)

    output = command("ingest_status", str(run.pk))

    assert output.startswith(f"run {run.pk} of orders (acme): failed, 0 of 2 batch(es) published")
    assert f"pipeline {run.pipeline}" in output
    assert "batch 1: hooks failed, 2 record(s); fetched 2" in output
    lines = output.splitlines()
    failing = [line for line in lines if line.strip().startswith("hook1")]
    assert len(failing) == 2
    assert failing[0].split()[:5] == ["hook1", "failed", "1", "Failed", "3"]
    assert "conveyor-hook-" in failing[0]
    assert any(line.strip().endswith("started via api") for line in lines)
    assert any("failed via pipeline: 2 of 2 batches failed their hooks" in line for line in lines)
    limited = command("ingest_status", str(run.pk), "--limit", "1")
    assert "(1 earlier batch(es) not shown; --limit shows more)" in limited
    assert "batch 1:" not in limited and "batch 2:" in limited


def test_status_of_a_run_not_found_is_an_error(acme, globex):
    run = services.start_ingest(builders.source(acme))

    assert str(refused("ingest_status", "999999")) == "no run 999999"
    assert str(refused("ingest_status", str(run.pk), "--tenant", "globex")) == (
        f"no run {run.pk} of tenant 'globex'"
    )
    assert str(refused("ingest_status", "--limit", "0")) == "--limit must be at least 1"
    assert command("ingest_status", "--tenant", "globex") == "(no runs)\n"
