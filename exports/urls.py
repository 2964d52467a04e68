"""Routes of the exports app: mappings, datasets and snapshots in the REST API
(``/api/exports/…``). Export workers speak the engine's remote-worker API
(``/internal/jobs/…``, ``console.api.remote``)."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from exports import api

router = SimpleRouter()
router.register("exports/mappings", api.MappingViewSet, basename="exports-mapping")
router.register("exports/snapshots", api.SnapshotViewSet, basename="exports-snapshot")

urlpatterns = [
    path("api/", include(router.urls)),
    path("api/exports/datasets/", api.DatasetsView.as_view(), name="exports-datasets"),
]
