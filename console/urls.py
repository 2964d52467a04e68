"""Routes of the console's HTTP surfaces: the REST API, the manual recovery route, the
Prometheus page and the event streams (SSE; the WebSocket is routed in project/asgi.py).
The OpenAPI schema and docs are wired in ``project/urls.py``."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from console.api import remote
from console.api.views import EventViewSet, JobViewSet, SyncJobViewSet
from console.prometheus import metrics_view
from console.streams import sse

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("events", EventViewSet, basename="event")

urlpatterns = [
    path("api/", include(router.urls)),
    # The manual recovery endpoint, kept at the address operators' scripts already call.
    path("sync/jobs/<int:pk>/recover", SyncJobViewSet.as_view({"post": "recover"}), name="sync-job-recover"),
    path("metrics", metrics_view, name="metrics"),
    # Remote workers (console/api/remote.py).
    path("internal/jobs/claim", remote.Claim.as_view(), name="remote-claim"),
    path("internal/jobs/heartbeat", remote.Heartbeat.as_view(), name="remote-heartbeat"),
    path("internal/jobs/release", remote.Release.as_view(), name="remote-release"),
    path("internal/jobs/<int:job_id>/complete", remote.Complete.as_view(), name="remote-complete"),
    path("internal/jobs/<int:job_id>/fail", remote.Fail.as_view(), name="remote-fail"),
    path("internal/jobs/<int:job_id>/snooze", remote.Snooze.as_view(), name="remote-snooze"),
    # Live events (server-sent events; docs/streams.md).
    path("jobs/<int:pk>/events", sse.job_events, name="job-events"),
    path("sync/pipelines/<uuid:pipeline>/events", sse.pipeline_events, name="pipeline-events"),
]
