"""A run's jobs on their pages say what they work for: the run and batch as links, the
failed hook's own words, and the run page's retry ahead of the job's."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from ingest.runs import services
from ingest.runs.models import RunStatus
from jobs.models import Job
from tests.support.base import page, staff
from tests.support.ingest import builders
from tests.support.ingest.running import drain

pytestmark = pytest.mark.django_db

JOBS = "/admin/jobs/job/"


def failed_hook_run(tenant, clock):
    source = builders.source(
        tenant, batches=1, hooks=[builders.exit_with(3, "record 17: price is negative")], max_failures=1
    )
    run = services.start_ingest(source)
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    return run, Job.objects.get(type="ingest.RunHooks", pipeline_id=run.pipeline, state="failed")


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_failed_hooks_job_page_links_its_run_and_batch_says_the_hook_and_offers_the_runs_retry(
    admin_client, acme, clock
):
    run, job = failed_hook_run(acme, clock)
    batch = run.batches.get()

    text = html_lib.unescape(page(admin_client, f"{JOBS}{job.pk}/change/"))

    assert f'<a href="/admin/ingest/ingestrun/{run.pk}/change/">Ingest run {run.pk} (acme/orders)</a>' in text
    assert f'<a href="/admin/ingest/ingestrun/{run.pk}/change/#batch-{batch.sequence}">batch 1</a>' in text
    assert "Hook hook0 on batch 1 failed with exit code 3: record 17: price is negative" in text
    assert f'action="/admin/ingest/ingestrun/{run.pk}/retry-hooks/"' in text
    assert "Retry the failed hooks" in text
    assert "Retrying this job alone would not reopen the run: use “Retry the failed hooks” above." in text
    # The why line points at the run's retry, not the job's.
    assert f"it works for Ingest run {run.pk} (acme/orders): use “Retry the failed hooks”" in text
    assert "retry it to run again" not in text
    # The job's own retry stays (the engine's paths use it).
    assert f'formaction="/admin/jobs/job/{job.pk}/retry/"' in text


def test_the_runs_retry_from_the_job_page_reopens_the_run(admin_client, acme, clock):
    run, job = failed_hook_run(acme, clock)
    builders.run_instead(run.source, builders.PASS)

    response = admin_client.post(f"/admin/ingest/ingestrun/{run.pk}/retry-hooks/", follow=True)
    drain(clock)

    assert f"Run {run.pk}: the hooks of 1 batch(es) run again." in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


def test_no_link_without_the_permission_to_view_runs(acme, clock):
    run, job = failed_hook_run(acme, clock)
    user = staff("bob", of=acme)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="jobs"))

    text = page(browser(user), f"{JOBS}{job.pk}/change/")

    assert "Works for" not in text and f"/admin/ingest/ingestrun/{run.pk}/" not in text


def test_a_viewer_without_the_operate_permission_gets_the_link_but_no_button(acme, clock):
    run, job = failed_hook_run(acme, clock)
    user = staff("carol", of=acme)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=["jobs", "ingest"], codename__startswith="view_"
        )
    )

    text = page(browser(user), f"{JOBS}{job.pk}/change/")

    assert f'href="/admin/ingest/ingestrun/{run.pk}/change/"' in text
    assert "retry-hooks" not in text


def test_a_run_of_another_tenant_is_no_subject(acme, globex, clock):
    """The job's row is the tenant's; a run of another tenant named in its payload is not
    its subject, and platform staff's job page shows only the job's own tenant's run."""
    run, job = failed_hook_run(acme, clock)
    other, _ = failed_hook_run(globex, clock)
    Job.objects.filter(pk=job.pk).update(
        pipeline_id=other.pipeline, payload={"payload": {"run": other.pk, "batch": 0}}
    )
    user = staff("dora", of=acme)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["jobs", "ingest"]))

    text = page(browser(user), f"{JOBS}{job.pk}/change/")

    assert "Works for" not in text
    assert f"/admin/ingest/ingestrun/{other.pk}/" not in text


def test_the_failure_group_and_its_retry_preview_link_each_jobs_run(admin_client, acme, clock):
    run, job = failed_hook_run(acme, clock)
    label = f"Ingest run {run.pk} (acme/orders)"

    groups = page(admin_client, f"{JOBS}triage/?window=24h")
    group = next(
        row for row in re.findall(r'<tr class="failure-group".*?</tr>', groups, re.S) if "RunHooks" in row
    )
    fingerprint = re.search(r'data-fingerprint="([^"]+)"', group).group(1)
    preview = page(admin_client, f"{JOBS}triage/{fingerprint}/retry/?window=24h")

    assert f'for <a href="/admin/ingest/ingestrun/{run.pk}/change/">{label}</a>' in group
    assert f'<a href="/admin/ingest/ingestrun/{run.pk}/change/">{label}</a>' in preview


def hooks_group(client: Client) -> str:
    """The retry preview's address of the failed hooks' group."""
    groups = page(client, f"{JOBS}triage/?window=24h")
    group = next(
        row for row in re.findall(r'<tr class="failure-group".*?</tr>', groups, re.S) if "RunHooks" in row
    )
    fingerprint = re.search(r'data-fingerprint="([^"]+)"', group).group(1)
    return f"{JOBS}triage/{fingerprint}/retry/?window=24h"


def test_retrying_the_failure_group_warns_first_that_the_run_has_its_own_retry_and_offers_it(
    admin_client, acme, clock
):
    run, job = failed_hook_run(acme, clock)

    preview = html_lib.unescape(page(admin_client, hooks_group(admin_client)))

    warning = re.search(r'<div id="triage-own-retry".*?</div>', preview, re.S).group(0)
    assert "Retrying is not the fix for 1 of these 1 job: it works for something" in re.sub(
        "<[^>]+>", "", warning
    )
    assert (
        f'<a href="/admin/ingest/ingestrun/{run.pk}/change/">Ingest run {run.pk} (acme/orders)</a> (1 job): '
        "retrying this job alone would not reopen the run."
    ) in warning
    assert f'action="/admin/ingest/ingestrun/{run.pk}/retry-hooks/"' in warning
    assert "Retry the failed hooks" in warning
    # Before the operator confirms: above the form that retries the jobs.
    assert preview.index('id="triage-own-retry"') < preview.index('value="Yes, retry 1 job"')


def test_the_warning_counts_every_job_and_names_the_first_runs_only(
    admin_client, acme, globex, clock, monkeypatch
):
    from console.admin import triage

    monkeypatch.setattr(triage, "OWN_RETRIES_SHOWN", 1)
    failed_hook_run(acme, clock)
    failed_hook_run(globex, clock)

    response = admin_client.get(hooks_group(admin_client))

    assert response.context["own_retry_jobs"] == 2
    assert len(response.context["own_retries"]) == 1 and response.context["own_retry_more"] == 1
    assert "… and 1 more: <a href=" in response.content.decode()


def test_whom_may_not_view_runs_is_shown_neither_the_run_nor_its_retry(acme, clock):
    """The warning comes from the subjects the user may see: without the runs' view
    permission there is neither a link to the run nor its retry."""
    failed_hook_run(acme, clock)
    user = staff("bob", of=acme)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="jobs"))

    text = page(browser(user), hooks_group(browser(user)))

    assert 'id="triage-own-retry"' not in text and "/admin/ingest/ingestrun/" not in text
