"""Routes of the ingest app: its runs in the REST API (``/api/ingest/runs/``)."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from ingest.runs.api import RunViewSet

router = SimpleRouter()
router.register("ingest/runs", RunViewSet, basename="ingest-run")

urlpatterns = [
    path("api/", include(router.urls)),
]
