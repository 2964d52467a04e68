"""The demo a new user finds, and the hook it runs."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

import jobs
from ingest.hookkit import check_records
from ingest.runs.models import HookExecution, IngestRun
from jobs.models import JobEvent, Worker
from jobs.testing import wait_until
from tests.system.conftest import processes  # noqa: F401 (fixture)


@pytest.mark.django_db(transaction=True)
def test_the_demo_makes_a_source_and_a_finished_run_once(settings, tmp_path):
    settings.INGEST_FILE_ROOTS = [str(tmp_path)]
    out = io.StringIO()
    call_command("ingest_demo", stdout=out)
    run = IngestRun.objects.get()
    assert (run.status, run.batches_published, run.records_published) == ("succeeded", 5, 120)
    assert "every record passed" in HookExecution.objects.first().log_tail
    hook = run.source.hooks.get()  # an entry of the catalogue, with its parameters
    assert (hook.template.name, hook.template.enabled) == ("check-records", True)
    assert hook.parameters == {"require": "id,amount", "unique": "id"}
    call_command("ingest_demo", stdout=out)
    assert IngestRun.objects.count() == 1
    assert "already loaded" in out.getvalue()


def test_check_records_names_what_is_wrong(tmp_path, monkeypatch, capsys):
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"id": "a", "amount": "1"}\n{"id": "a", "amount": "2"}\n[1]\n{"id": "b"}\nnope\n')
    monkeypatch.setenv("INGEST_BATCH_URL", str(batch))
    assert check_records.main(["--require", "id,amount", "--unique", "id"]) == 1
    printed = capsys.readouterr().out
    assert "line 2: id 'a' seen twice" in printed
    assert "line 3: not a JSON object" in printed
    assert "line 4: missing amount" in printed
    assert "line 5: not JSON" in printed
    batch.write_text('{"id": "a", "amount": "1"}\n')
    assert check_records.main(["--require", "id,amount", "--unique", "id"]) == 0


def test_check_records_names_a_line_that_is_not_utf8():
    lines = iter([b'{"id": "\xff"}\n', b'{"id": "b"}\n'])
    assert list(check_records.problems(lines, ["id"], "id")) == [
        "line 1: not JSON (not UTF-8: invalid start byte)"
    ]


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_the_demo_leaves_its_run_to_a_running_cluster_and_reports_when_it_finished(
    settings,
    tmp_path,
    processes,  # noqa: F811 (the fixture)
):
    settings.INGEST_FILE_ROOTS = [str(tmp_path)]
    settings.INTAKE_STAGING_URL = str(tmp_path / "staging")
    worker = processes.manage(
        "worker",
        "jobs_worker",
        env=processes.env(INGEST_FILE_ROOTS=str(tmp_path), JOBS_HEARTBEAT_SECONDS="0.5"),
    )
    wait_until(lambda: Worker.objects.exists() or worker.exited(), 60, "the cluster's worker to start")
    cluster = set(Worker.objects.values_list("name", flat=True))
    out = io.StringIO()

    call_command("ingest_demo", "--wait", "120", stdout=out)

    run = IngestRun.objects.get()
    assert (run.status, run.batches_published, run.records_published) == ("succeeded", 5, 120)
    assert "a cluster is running, waiting for it to finish the run (at most 120 s)" in out.getvalue()
    assert f"run {run.pk} of demo-orders published 120 records in 5 batches" in out.getvalue()
    # Every job of the run was the cluster's: none was taken here, racing its worker.
    claimed = set(
        JobEvent.objects.filter(job__pipeline_id=run.pipeline, kind="claimed").values_list(
            "worker", flat=True
        )
    )
    assert claimed and claimed <= cluster, (claimed, cluster)


@pytest.mark.django_db
def test_the_demo_says_a_run_the_cluster_has_not_finished_is_still_running(settings, tmp_path):
    settings.INGEST_FILE_ROOTS = [str(tmp_path)]
    # A cluster's worker, as its heartbeat shows it, that claims nothing in this test.
    Worker.objects.create(
        name="elsewhere", hostname="node-2", pid=1, started_at=jobs.now(), last_seen_at=jobs.now()
    )
    out = io.StringIO()

    call_command("ingest_demo", "--wait", "0", stdout=out)

    run = IngestRun.objects.get()
    assert run.status == "running"
    assert (
        f"run {run.pk} of demo-orders is still running after 0 s; the cluster carries it on. "
        f"Follow it with `manage.py ingest_status {run.pk}`."
    ) in out.getvalue()
