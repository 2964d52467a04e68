"""Ingest's figures on the console's front page: how fresh the market data is, and the
hook runners' breakers (one per target and tenant) that keep hooks from launching: a
tenant's staff count their own, platform operators every tenant's."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import reverse

import jobs
from ingest.market import freshness, services
from ingest.market.models import MarketFeed
from ingest.runs.models import BreakerState, RunnerBreaker
from jobs.contrib.admin.overview import viewable_admin
from jobs.contrib.overview import Figure
from tenancy.scoping import scope_queryset


def figures(request: HttpRequest) -> list[Figure]:
    """Each figure over the rows its admin list shows this user, and only if they may
    see that list."""
    shown: list[Figure] = []
    if viewable_admin(request, MarketFeed) is not None:
        # As the feeds' board shows them: every dataset of every feed the user sees, one
        # never attempted counting as never ingested.
        statuses = [
            row.status
            for row in services.source_statuses(
                list(scope_queryset(MarketFeed.objects.all(), request.user)), jobs.now()
            )
        ]
        if statuses:
            board = reverse("admin:ingest_marketfeed_board")
            failing = sum(status == freshness.ERROR for status in statuses)
            stale = sum(status in (freshness.STALE, freshness.NEVER_INGESTED) for status in statuses)
            shown.append(
                Figure(
                    "sources-error",
                    "market sources in error",
                    failing,
                    board,
                    tone="bad" if failing else "",
                    note=f"of {len(statuses)}: a failed last load, or a week without one",
                )
            )
            shown.append(
                Figure(
                    "sources-stale",
                    "market sources stale",
                    stale,
                    board,
                    tone="warn" if stale else "",
                    note="no load in 48 hours, or never loaded",
                )
            )
    breakers = viewable_admin(request, RunnerBreaker)
    if breakers is not None:
        opened = breakers.get_queryset(request).exclude(state=BreakerState.CLOSED).count()
        url = (
            f"{reverse('admin:ingest_runnerbreaker_changelist')}"
            f"?state__in={BreakerState.OPEN},{BreakerState.HALF_OPEN}"
        )
        shown.append(
            Figure(
                "breakers-open",
                "hook runners' breakers open",
                opened,
                url,
                tone="bad" if opened else "",
                note="their tenant's hooks do not launch on these targets until their probe",
            )
        )
    return shown
