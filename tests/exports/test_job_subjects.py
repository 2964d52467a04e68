"""An exports engine job's page says what it works for: the snapshot and its export job."""

from __future__ import annotations

import pytest

from jobs.models import Job
from tests.support.base import make_job, page
from tests.support.exports import builders

pytestmark = pytest.mark.django_db


def test_a_cancel_query_job_links_its_snapshot_and_export_job(admin_client, acme):
    snap = builders.snapshot(of=acme)
    export = builders.jobs_of(snap)[0]
    job = make_job("exports.CancelQuery", {"job": export.pk}, tenant=acme.pk)

    text = page(admin_client, f"/admin/jobs/job/{job.pk}/change/")

    assert (
        f'<a href="/admin/exports/snapshot/{snap.pk}/change/">Snapshot {snap.pk} of {snap.mapping}</a>'
        in text
    )
    assert f'href="/admin/exports/snapshot/{snap.pk}/change/#job-{export.pk}">export job {export.pk}' in text


def test_another_tenants_export_job_is_no_subject(admin_client, acme, globex):
    snap = builders.snapshot(of=globex)
    job = make_job("exports.CancelQuery", {"job": builders.jobs_of(snap)[0].pk}, tenant=acme.pk)

    assert "Works for" not in page(admin_client, f"/admin/jobs/job/{Job.objects.get(pk=job.pk).pk}/change/")


def test_an_exports_own_engine_job_links_its_snapshot_and_export(admin_client, acme):
    snap = builders.snapshot(of=acme)
    export = builders.jobs_of(snap)[1]
    assert Job.objects.get(pk=export.job_id).type == "exports.export"

    text = page(admin_client, f"/admin/jobs/job/{export.job_id}/change/")

    assert (
        f'<a href="/admin/exports/snapshot/{snap.pk}/change/">Snapshot {snap.pk} of {snap.mapping}</a>'
        in text
    )
    assert f"#job-{export.pk}" in text and f"export job {export.pk} ({export.entity_name})" in text


def test_a_snapshots_engine_jobs_are_one_pipeline_in_claim_order(acme):
    snap = builders.snapshot(of=acme)
    rows = builders.jobs_of(snap)
    engine_jobs = [Job.objects.get(pk=row.job_id) for row in rows]
    assert len({job.pipeline_id for job in engine_jobs}) == 1
    assert [job.pk for job in engine_jobs] == sorted(job.pk for job in engine_jobs)
    assert {(job.queue, job.tenant_id) for job in engine_jobs} == {("exports", acme.pk)}
