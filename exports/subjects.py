"""What the exports' engine jobs work for (``console.admin.register_job_subject``): the
snapshot and export an ``exports.export`` job runs, and those whose query an
``exports.CancelQuery`` cancels. The console's job pages, triage and failure groups name
them, with a link to the snapshot's page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse

import jobs
from console.admin import Subject, SubjectAction
from exports.models import ExportJob, JobStatus, Snapshot
from tenancy.scoping import scope_queryset

SNAPSHOT_JOBS = ["exports.export", "exports.CancelQuery"]
# The payload key naming the export each type works for.
EXPORT_KEY = {"exports.export": "export", "exports.CancelQuery": "job"}


def snapshot_subjects(request: HttpRequest, found: Sequence[jobs.Job], detail: bool) -> Mapping[int, Subject]:
    named = {
        job.pk: value
        for job in found
        if isinstance(job.payload, dict)
        and isinstance(value := job.payload.get(EXPORT_KEY.get(job.type, "job")), int)
    }
    rows = scope_queryset(ExportJob.objects.select_related("snapshot__mapping"), request.user)
    by_id = {row.pk: row for row in rows.filter(pk__in=set(named.values()))}
    may_operate = detail and admin.site.get_model_admin(Snapshot).has_operate_permission(request)  # type: ignore[attr-defined]
    subjects = {}
    for job in found:
        export = by_id.get(named.get(job.pk, 0))
        if export is None or export.tenant_id != job.tenant_id:
            continue
        snapshot = export.snapshot
        retry = reverse("admin:exports_snapshot_retry", args=[snapshot.pk, export.pk])
        # An export's own job is retried as any job is, from its page; a CancelQuery's
        # page offers the export's retry.
        actions = (
            (SubjectAction(f"Retry export job {export.pk}", retry),)
            if may_operate and export.status == JobStatus.FAILED and job.type != "exports.export"
            else ()
        )
        subjects[job.pk] = Subject(
            f"Snapshot {snapshot.pk} of {snapshot.mapping}",
            reverse("admin:exports_snapshot_change", args=[snapshot.pk]),
            (
                (
                    f"export job {export.pk} ({export.entity_name})",
                    reverse("admin:exports_snapshot_change", args=[snapshot.pk]) + f"#job-{export.pk}",
                ),
            ),
            message=(export.error_message or snapshot.error) if detail else "",
            actions=actions,
        )
    return subjects
