"""Exports' figure on the console's front page: snapshots being made, and those that
failed in the last day."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpRequest
from django.urls import reverse
from django.utils.http import urlencode

import jobs
from console.admin import Figure, front_page_figures, viewable_admin
from exports.models import Snapshot, SnapshotStatus
from tenancy.scoping import scope_queryset


@front_page_figures
def figures(request: HttpRequest) -> list[Figure]:
    if viewable_admin(request, Snapshot) is None:
        return []
    # The admin's own queryset sums every snapshot's jobs: counting needs only the rows,
    # scoped to the user exactly as the admin scopes them.
    visible = scope_queryset(Snapshot.objects.all(), request.user)
    in_flight = visible.filter(status__in=[SnapshotStatus.PENDING, SnapshotStatus.CREATING]).count()
    since = jobs.now() - timedelta(days=1)
    failed = visible.filter(status=SnapshotStatus.FAILED, finished_at__gte=since).count()
    url = reverse("admin:exports_snapshot_changelist")
    failed_since = urlencode(
        {"status__exact": SnapshotStatus.FAILED, "finished_at__gte": since.isoformat(timespec="seconds")}
    )
    return [
        Figure(
            "snapshots-in-flight",
            "snapshots being made",
            in_flight,
            f"{url}?status__in={SnapshotStatus.PENDING},{SnapshotStatus.CREATING}",
        ),
        Figure(
            "snapshots-failed",
            "snapshots failed in the last day",
            failed,
            f"{url}?{failed_since}",
            tone="bad" if failed else "",
        ),
    ]
