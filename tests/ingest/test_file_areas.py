"""A files source reads only its own tenant's directory under the file roots: refused
when saved in the admin, and again when a run fetches (a source saved before the rule,
or written behind the form's back), so nothing of another tenant's is ever published."""

from __future__ import annotations

import json

import pytest

import jobs
from ingest.runs import services
from ingest.runs.models import IngestRecord, IngestSource, RunStatus
from jobs.models import Job
from tests.ingest.test_admin import SOURCES, staff_browser
from tests.support.ingest import builders
from tests.support.ingest.running import drain

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(settings, tmp_path, acme, globex):
    """A file root holding two tenants' directories, each with one file of records."""
    settings.INGEST_FILE_ROOTS = [str(tmp_path)]
    for tenant in (acme, globex):
        (tmp_path / tenant.slug).mkdir()
        (tmp_path / tenant.slug / "records.jsonl").write_text(
            "".join(json.dumps({"owner": tenant.slug, "n": n}) + "\n" for n in range(30))
        )
    return tmp_path


def files_source_form(url: str, pattern: str = "*.jsonl") -> dict[str, str]:
    return {
        "name": "files",
        "kind": "files",
        "config": json.dumps({"url": url, "pattern": pattern}),
        "batch_size": "100",
        "max_failures": "3",
        "enabled": "on",
        "hooks-TOTAL_FORMS": "0",
        "hooks-INITIAL_FORMS": "0",
        "hooks-MIN_NUM_FORMS": "0",
        "hooks-MAX_NUM_FORMS": "1000",
    }


@pytest.mark.parametrize("where", ["{root}/globex", "{root}"])
def test_tenant_staff_cannot_save_a_source_over_another_tenants_files_or_the_root(root, acme, where):
    alice = staff_browser("alice", acme)

    response = alice.post(f"{SOURCES}add/", files_source_form(where.format(root=root), "**/*.jsonl"))

    assert response.status_code == 200
    assert f"must lie in this tenant&#x27;s directory: {root}/acme" in response.content.decode()
    assert not IngestSource.objects.exists()


def test_tenant_staff_save_a_source_over_their_own_files(root, acme):
    alice = staff_browser("alice", acme)

    response = alice.post(f"{SOURCES}add/", files_source_form(f"{root}/acme"))

    assert response.status_code == 302, response.content.decode()
    assert IngestSource.objects.get().config["url"] == f"{root}/acme"


@pytest.mark.parametrize("where", ["{root}/globex", "{root}"])
def test_a_run_over_another_tenants_files_is_refused_or_fails_and_publishes_nothing(root, acme, clock, where):
    source = builders.source(
        acme, kind="files", hooks=(), config={"url": where.format(root=root), "pattern": "**/*.jsonl"}
    )
    with pytest.raises(services.RunRefused, match="must lie in this tenant's directory"):
        services.start_ingest(source)
    # Written behind the form's back once the run is under way: its fetch refuses it too.
    source.config = {"url": f"{root}/acme"}
    source.save()
    run = services.start_ingest(source)
    IngestSource.objects.filter(pk=source.pk).update(
        config={"url": where.format(root=root), "pattern": "**/*.jsonl"}
    )
    drain(clock)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "must lie in this tenant's directory" in run.failure_reason
    assert not IngestRecord.objects.exists()


def test_a_setting_of_the_wrong_type_is_a_form_error_naming_it_and_nothing_is_saved(root, acme):
    alice = staff_browser("alice", acme)
    form = {**files_source_form(f"{root}/acme"), "config": json.dumps({"url": f"{root}/acme", "pattern": 5})}

    response = alice.post(f"{SOURCES}add/", form)

    assert response.status_code == 200
    assert "pattern: must be text, not a number" in response.content.decode()
    assert not IngestSource.objects.exists()


def test_a_source_is_saved_with_its_config_as_the_ingester_checked_it(root, acme):
    alice = staff_browser("alice", acme)
    form = {**files_source_form(f"{root}/acme"), "config": json.dumps({"url": f"{root}/acme"})}

    response = alice.post(f"{SOURCES}add/", form)

    assert response.status_code == 302, response.content.decode()
    assert IngestSource.objects.get().config == {"url": f"{root}/acme", "pattern": "*"}


def test_a_run_whose_stored_config_cannot_be_used_fails_at_its_first_delivery(root, acme, clock):
    source = builders.source(acme, kind="files", hooks=(), config={"url": f"{root}/acme"})
    run = services.start_ingest(source)
    # As a row saved before configs were checked, or written by a migration, would hold it.
    IngestSource.objects.filter(pk=source.pk).update(config={"url": f"{root}/acme", "pattern": 5})

    jobs.run_until_idle()

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.failure_reason == (
        "fetching batch 1 failed: the source's config cannot be used: pattern: must be text, not a number"
    )
    fetch = Job.objects.get(pipeline_id=run.pipeline, type="ingest.RunIngester")
    assert (fetch.state, fetch.attempts, fetch.error_kind) == ("failed", 1, "permanent")
    assert not IngestRecord.objects.exists()


def test_a_run_over_its_own_files_publishes_only_them(root, acme, clock):
    source = builders.source(
        acme, kind="files", hooks=(), config={"url": f"{root}/acme", "pattern": "**/*.jsonl"}
    )

    run = services.start_ingest(source)
    drain(clock)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert {record.data["owner"] for record in IngestRecord.objects.all()} == {"acme"}
    assert IngestRecord.objects.count() == 30


def test_a_runs_batches_are_staged_in_its_tenants_own_folder(
    root, acme, globex, clock, settings, tmp_path_factory
):
    settings.INTAKE_STAGING_URL = str(tmp_path_factory.mktemp("staging"))
    staged = services.stage_records([{"n": 1}], 1024, tenant=acme.slug)

    assert services.batches_store(acme.slug).exists(staged)
    assert not services.batches_store(globex.slug).exists(staged)
    assert services.batches_store(acme.slug).location(staged) == (
        f"{settings.INTAKE_STAGING_URL}/{services.STAGING_AREA}/acme/{staged}"
    )
    assert list(services.staged_lines(staged, tenant=acme.slug)) == ['{"n":1}\n']


@pytest.mark.parametrize("slug", ["", "..", "a/b", "../globex"])
def test_only_a_slug_names_a_staging_folder(slug):
    with pytest.raises(ValueError, match="is not a tenant's slug"):
        services.batches_store(slug)
