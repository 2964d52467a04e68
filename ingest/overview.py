"""Ingest's figures on the console's front page: how fresh the market data is, and the
hook runners whose circuit breaker keeps hooks from launching."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse

import jobs
from ingest.market import freshness
from ingest.market.models import SourceFreshness
from ingest.runs.models import BreakerState, RunnerBreaker
from jobs.contrib.overview import Figure


def figures(request: HttpRequest) -> list[Figure]:
    """Each figure over the rows its admin list shows this user, and only if they may
    see that list."""
    shown: list[Figure] = []
    sources = admin.site._registry.get(SourceFreshness)
    if sources is not None and sources.has_view_permission(request):
        now = jobs.now()
        statuses = [freshness.status(success, failure, now) for success, failure in
                    sources.get_queryset(request).values_list("last_success", "last_failure")]
        if statuses:
            board = reverse("admin:ingest_marketfeed_board")
            failing = sum(status == freshness.ERROR for status in statuses)
            stale = sum(status in (freshness.STALE, freshness.NEVER_INGESTED) for status in statuses)
            shown.append(Figure("sources-error", "market sources in error", failing, board,
                                tone="bad" if failing else "",
                                note=f"of {len(statuses)}: a failed last load, or a week without one"))
            shown.append(Figure("sources-stale", "market sources stale", stale, board,
                                tone="warn" if stale else "",
                                note="no load in 48 hours, or never loaded"))
    breakers = admin.site._registry.get(RunnerBreaker)
    if breakers is not None and breakers.has_view_permission(request):
        opened = breakers.get_queryset(request).exclude(state=BreakerState.CLOSED).count()
        url = (f"{reverse('admin:ingest_runnerbreaker_changelist')}"
               f"?state__in={BreakerState.OPEN},{BreakerState.HALF_OPEN}")
        shown.append(Figure("breakers-open", "hook runners' breakers open", opened, url,
                            tone="bad" if opened else "",
                            note="no hook launches on these targets until their probe"))
    return shown
