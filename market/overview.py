"""Market data's figures on the console's front page: how fresh the feeds' sources are,
over the feeds the user may see (a tenant's staff their own, platform operators every
tenant's)."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import reverse

import jobs
from console.admin import Figure, front_page_figures, viewable_admin
from market import freshness, services
from market.models import MarketFeed
from tenancy.scoping import scope_queryset


@front_page_figures
def figures(request: HttpRequest) -> list[Figure]:
    """The sources in error and the stale ones, if the user may see the feeds' list."""
    if viewable_admin(request, MarketFeed) is None:
        return []
    # As the feeds' board shows them: every dataset of every feed the user sees, one
    # never attempted counting as never ingested.
    statuses = [
        row.status
        for row in services.source_statuses(
            list(scope_queryset(MarketFeed.objects.all(), request.user)), jobs.now()
        )
    ]
    if not statuses:
        return []
    board = reverse("admin:market_marketfeed_board")
    failing = sum(status == freshness.ERROR for status in statuses)
    stale = sum(status in (freshness.STALE, freshness.NEVER_INGESTED) for status in statuses)
    return [
        Figure(
            "sources-error",
            "market sources in error",
            failing,
            board,
            tone="bad" if failing else "",
            note=f"of {len(statuses)}: a failed last load, a week without one, or days no batch heals",
        ),
        Figure(
            "sources-stale",
            "market sources stale",
            stale,
            board,
            tone="warn" if stale else "",
            note="no load in 48 hours, or never loaded",
        ),
    ]
