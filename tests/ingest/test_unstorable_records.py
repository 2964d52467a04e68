"""A source's record that PostgreSQL's jsonb cannot store (a lone surrogate, a NUL
character, NaN) is refused where the batch is staged, naming the record: the run fails
at once and nothing is published, instead of a batch that fails at every publish."""

from __future__ import annotations

import pytest

from ingest.runs import services
from ingest.runs.models import IngestBatch, IngestRecord, RunStatus
from tests.support.ingest import builders
from tests.support.ingest.running import drain

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "line, problem",
    [
        (rb'{"n": "\ud800"}', "lone surrogate"),
        (rb'{"n": "a\u0000b"}', "NUL"),
        (rb'{"n": NaN}', "NaN"),
    ],
)
def test_a_record_postgresql_cannot_store_fails_the_run_naming_it(
    settings, tmp_path, acme, clock, line, problem
):
    settings.INGEST_FILE_ROOTS = [str(tmp_path)]
    (tmp_path / acme.slug).mkdir()
    (tmp_path / acme.slug / "a.jsonl").write_bytes(b'{"n": "fine"}\n' + line + b"\n")
    source = builders.source(
        acme, kind="files", hooks=(), config={"url": str(tmp_path / acme.slug), "pattern": "*.jsonl"}
    )

    run = services.start_ingest(source)
    drain(clock)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "cannot stage its records: record 2" in run.failure_reason
    assert problem in run.failure_reason
    assert not IngestBatch.objects.exists() and not IngestRecord.objects.exists()
