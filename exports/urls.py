"""Routes of the exports app: mappings, datasets and snapshots in the REST API
(``/api/exports/…``), and the export workers' internal control plane
(``/internal/exports/…``)."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from exports import api, control_plane

router = SimpleRouter()
router.register("exports/mappings", api.MappingViewSet, basename="exports-mapping")
router.register("exports/snapshots", api.SnapshotViewSet, basename="exports-snapshot")

urlpatterns = [
    path("api/", include(router.urls)),
    path("api/exports/datasets/", api.DatasetsView.as_view(), name="exports-datasets"),
    path("internal/exports/claim", control_plane.Claim.as_view(), name="exports-claim"),
    path("internal/exports/pollable", control_plane.Pollable.as_view(), name="exports-pollable"),
    path("internal/exports/jobs/<int:job_id>/report", control_plane.Report.as_view(), name="exports-report"),
    path(
        "internal/exports/snapshots/<int:snapshot_id>/finalize",
        control_plane.Finalize.as_view(),
        name="exports-finalize",
    ),
]
