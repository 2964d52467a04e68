"""The engine's workers, read-only: each cluster process registers and refreshes itself."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.http import HttpRequest

from jobs import clock
from jobs.conf import WORKER_STALE_SECONDS
from jobs.models import Worker
from tenancy.scoping import tenant_scope


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "alive",
        "hostname",
        "pid",
        "queues_display",
        "started_at",
        "last_seen_at",
        "jobs_done",
    ]
    fields = readonly_fields = (
        "name",
        "alive",
        "hostname",
        "pid",
        "queues_display",
        "started_at",
        "last_seen_at",
        "jobs_done",
    )
    search_fields = ["name", "hostname"]

    def has_view_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        # Workers are the platform's machines, not any one tenant's.
        return tenant_scope(request.user) is True and super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # each cluster process registers itself

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False  # the reaper forgets dead workers

    @admin.display(description="alive", boolean=True)
    def alive(self, worker: Worker) -> bool:
        """Seen within the window after which the reaper presumes a worker dead."""
        return worker.last_seen_at >= clock.now() - timedelta(seconds=WORKER_STALE_SECONDS)

    @admin.display(description="queues")
    def queues_display(self, worker: Worker) -> str:
        return ", ".join(worker.queues) if worker.queues else "every queue"
