"""Routes of the ingest app: its runs in the REST API (``/api/ingest/runs/``), and the
scraper's sync and handoffs (``/scraping/{source}/…``, the addresses scrapers call)."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from ingest.runs.api import RunViewSet
from ingest.scraping import api as scraping

router = SimpleRouter()
router.register("ingest/runs", RunViewSet, basename="ingest-run")

urlpatterns = [
    path("api/", include(router.urls)),
    path("scraping/<str:source>/sync", scraping.Sync.as_view(), name="scraping-sync"),
    path("scraping/<str:source>/handoffs", scraping.Handoffs.as_view(), name="scraping-handoffs"),
    path(
        "scraping/<str:source>/handoffs/redrive", scraping.Redrive.as_view(), name="scraping-handoffs-redrive"
    ),
]
