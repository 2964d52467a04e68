"""Routes of the market app: the market data's freshness (``/quality/status``, for
monitors)."""

from __future__ import annotations

from django.urls import path

from market import api

urlpatterns = [
    path("quality/status", api.QualityStatus.as_view(), name="quality-status"),
]
