"""Routes of the exports app: the export workers' internal control plane
(``/internal/exports/…``)."""

from __future__ import annotations

from django.urls import path

from exports import control_plane

urlpatterns = [
    path("internal/exports/claim", control_plane.Claim.as_view(), name="exports-claim"),
    path("internal/exports/pollable", control_plane.Pollable.as_view(), name="exports-pollable"),
    path("internal/exports/jobs/<int:job_id>/report", control_plane.Report.as_view(),
         name="exports-report"),
    path("internal/exports/snapshots/<int:snapshot_id>/finalize", control_plane.Finalize.as_view(),
         name="exports-finalize"),
]
