"""What the factors jobs work for: the carbon report's module they load, recalculate or
aggregate, and the upload and load of a bulk ingest (``console.admin.register_job_subject``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from django.http import HttpRequest
from django.urls import reverse

import jobs
from console.admin import Subject
from factors.models import EntryLoad, ReportModule, Upload
from factors.payloads import MODULE_TENANT
from tenancy.scoping import scope_queryset

MODULE_JOBS = ["factors.csv_ingest", "factors.api_ingest", "factors.emission_recalc", "factors.aggregation"]


def _module_id(job: jobs.Job) -> int | None:
    value = job.payload.get("module") if isinstance(job.payload, dict) else None
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _upload_id(job: jobs.Job) -> str | None:
    """The staged upload a bulk ingest reads, if its payload names a well-formed one."""
    value = job.payload.get("upload") if isinstance(job.payload, dict) else None
    try:
        return str(uuid.UUID(value)) if isinstance(value, str) else None
    except ValueError:
        return None


def module_subjects(request: HttpRequest, found: Sequence[jobs.Job], detail: bool) -> Mapping[int, Subject]:
    named = {job.pk: pk for job in found if (pk := _module_id(job)) is not None}
    modules = scope_queryset(ReportModule.objects.select_related("report__unit"), request.user, MODULE_TENANT)
    by_id = {module.pk: module for module in modules.filter(pk__in=set(named.values()))}
    loads, uploads = set(), set()
    if detail:
        loads = set(
            EntryLoad.objects.filter(job_id__in=[job.pk for job in found]).values_list("job_id", flat=True)
        )
        wanted = {upload for job in found if (upload := _upload_id(job)) is not None}
        if wanted and request.user.has_perm("factors.view_upload"):
            visible = scope_queryset(Upload.objects.all(), request.user).filter(pk__in=wanted)
            uploads = {str(pk) for pk in visible.values_list("pk", flat=True)}
    subjects = {}
    for job in found:
        module = by_id.get(named.get(job.pk, 0))
        if module is None or module.report.unit.tenant_id != job.tenant_id:
            continue
        parts: list[tuple[str, str]] = []
        if job.pk in loads and request.user.has_perm("factors.view_entryload"):
            parts.append((f"load of job {job.pk}", reverse("admin:factors_entryload_change", args=[job.pk])))
        upload = _upload_id(job)
        if upload in uploads:
            parts.append(("upload", reverse("admin:factors_upload_change", args=[upload])))
        subjects[job.pk] = Subject(
            f"Carbon report {module.report}, module {module.get_module_type_display()}",
            reverse("admin:factors_carbonreport_change", args=[module.report_id]),
            tuple(parts),
        )
    return subjects
