"""Ingest's figures on the console's front page: the hook runners' breakers (one per
target and tenant) that keep hooks from launching: a tenant's staff count their own,
platform operators every tenant's."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import reverse

from console.admin import Figure, front_page_figures, viewable_admin
from ingest.runs.models import BreakerState, RunnerBreaker


@front_page_figures
def figures(request: HttpRequest) -> list[Figure]:
    """Each figure over the rows its admin list shows this user, and only if they may
    see that list."""
    breakers = viewable_admin(request, RunnerBreaker)
    if breakers is None:
        return []
    opened = breakers.get_queryset(request).exclude(state=BreakerState.CLOSED).count()
    url = (
        f"{reverse('admin:ingest_runnerbreaker_changelist')}"
        f"?state__in={BreakerState.OPEN},{BreakerState.HALF_OPEN}"
    )
    return [
        Figure(
            "breakers-open",
            "hook runners' breakers open",
            opened,
            url,
            tone="bad" if opened else "",
            note="their tenant's hooks do not launch on these targets until their probe",
        )
    ]
