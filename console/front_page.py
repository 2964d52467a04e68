"""The console's front page: what needs a person now, gathered from every app.

The engine gives its figures and tables (``console.admin.overview``); each pipeline
app gives a list of figures (``<app>.overview.figures``). Every figure links to the
admin list that explains it and counts the rows that list would show the same user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest

from console.admin import overview as jobs_overview
from console.overview import Figure
from exports import overview as exports_overview
from ingest import overview as ingest_overview
from market import overview as market_overview

# The apps' figure providers, in the order their figures appear after the engine's.
PROVIDERS: tuple[Callable[[HttpRequest], list[Figure]], ...] = (
    market_overview.figures,
    ingest_overview.figures,
    exports_overview.figures,
)


def build(request: HttpRequest) -> dict[str, Any]:
    """The front page's overview for ``request.user``: empty for a user who may see
    nothing of it."""
    engine = jobs_overview.section(request)
    figures = [figure for provider in PROVIDERS for figure in provider(request)]
    return {"engine": engine, "figures": figures, "shown": bool(engine or figures)}
