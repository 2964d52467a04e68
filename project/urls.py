from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from console.api.docs import ApiDocsView
from console.home import home
from project.not_found import API_PREFIXES, api_not_found, not_found

urlpatterns = [
    path("", home, name="home"),
    path("admin/", admin.site.urls),
    # Schema and Swagger UI, for authenticated users only (SPECTACULAR_SETTINGS); the UI's
    # assets come from drf-spectacular-sidecar, no CDN.
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", ApiDocsView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("console.urls")),
    path("", include("factors.urls")),
    path("", include("ingest.urls")),
    path("", include("market.urls")),
    path("", include("exports.urls")),
    # Last: whatever the routes above did not take under an API prefix is a JSON 404.
    re_path(rf"^(?:{'|'.join(API_PREFIXES)})/", api_not_found),
    re_path(r"^", not_found),
]
