"""The demo a new user finds, and the hook it runs."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from ingest.hookkit import check_records
from ingest.runs.models import HookExecution, IngestRun


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
