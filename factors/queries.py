"""Read helpers: what the API, the admin and other apps ask of the CO2 calculator."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import QuerySet

import jobs
from factors.models import PipelineModule, ReportModule


def recalculating(module_ids: Iterable[int]) -> set[int]:
    """The modules among ``module_ids`` that a pending or running job works on: a job of
    any pipeline linked to the module (the ingest, its recalculation, the aggregation).
    Two short statements: every response that shows a module asks."""
    ids = list(module_ids)
    if not ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT module_id, pipeline_id FROM factors_pipelinemodule WHERE module_id = ANY(%s)", [ids]
        )
        links = cursor.fetchall()
    busy = jobs.busy_pipelines({pipeline for _, pipeline in links})
    return {module for module, pipeline in links if pipeline in busy}


def is_recalculating(module: ReportModule) -> bool:
    return module.pk in recalculating([module.pk])


def pipeline_modules(
    pipeline_id: uuid.UUID, modules: QuerySet[ReportModule] | None = None
) -> list[ReportModule]:
    """The modules a pipeline works on, among ``modules`` (a scoped queryset: a factor
    upload's pipeline spans every tenant's modules, and each caller sees its own)."""
    module_ids = PipelineModule.objects.filter(pipeline_id=pipeline_id).values("module_id")
    queryset = modules if modules is not None else ReportModule.objects.all()
    return list(queryset.filter(pk__in=module_ids).select_related("report__unit").order_by("id")[:500])


def tenant_module(module_id: Any, tenant_id: int | None) -> ReportModule | None:
    """The module with this id if it belongs to ``tenant_id`` (any module for None, a
    platform job's view), with its report and unit; None otherwise, or for a bad id."""
    try:
        pk = int(module_id)
    except (TypeError, ValueError):
        return None
    modules = ReportModule.objects.select_related("report__unit").filter(pk=pk)
    if tenant_id is not None:
        modules = modules.filter(report__unit__tenant_id=tenant_id)
    return modules.first()
