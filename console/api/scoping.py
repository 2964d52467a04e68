"""The jobs a user of the API may see: their tenants' jobs (every job, for a platform
operator), as ``tenancy.scoping`` decides for every tenant-owned table."""

from __future__ import annotations

from typing import Any

from jobs.models import Job, JobQuerySet
from tenancy.scoping import scope_queryset


def visible_jobs(user: Any) -> JobQuerySet:
    """The jobs ``user`` may read, for a view to filter further."""
    return scope_queryset(Job.objects.all(), user)
