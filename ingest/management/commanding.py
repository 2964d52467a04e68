"""What the ingest commands share: the acting user, finding a source or a run by what an
operator types, and plain-text tables."""

from __future__ import annotations

from datetime import datetime

from django.core.management.base import CommandError
from django.db.models import QuerySet

from ingest.runs.models import IngestRun, IngestSource
from tenancy.models import Tenant


def tenant_named(slug: str | None) -> Tenant | None:
    if slug is None:
        return None
    found = Tenant.objects.filter(slug=slug).first()
    if found is None:
        raise CommandError(f"no tenant {slug!r}")
    return found


def source_named(name: str, tenant: Tenant | None) -> IngestSource:
    """The source called ``name`` (of ``tenant``, which must be given when several
    tenants have one of that name)."""
    sources = IngestSource.objects.select_related("tenant").filter(name=name)
    if tenant is not None:
        sources = sources.filter(tenant=tenant)
    found = list(sources[:10])
    if not found:
        of = f" of tenant {tenant.slug!r}" if tenant is not None else ""
        raise CommandError(f"unknown source {name!r}{of}")
    if len(found) > 1:
        tenants = ", ".join(sorted(source.tenant.slug for source in found))
        raise CommandError(
            f"several tenants have a source named {name!r} ({tenants}): name one with --tenant"
        )
    return found[0]


def runs_of(tenant: Tenant | None) -> QuerySet[IngestRun]:
    runs = IngestRun.objects.select_related("source", "tenant", "started_by")
    return runs if tenant is None else runs.filter(tenant=tenant)


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "—"


def outcome(run: IngestRun) -> str:
    """One line saying where a run stands."""
    line = (
        f"run {run.pk} of {run.source.name} ({run.tenant.slug}): {run.status}, "
        f"{run.batches_published} of {run.batches_ingested} batch(es) published, "
        f"{run.records_published} record(s), {run.hook_failures} hook failure(s)"
    )
    return f"{line}; {run.failure_reason}" if run.failure_reason else line
