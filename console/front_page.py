"""The console's front page: what needs a person now, gathered from every app.

The engine gives its figures and tables (``console.admin.overview``); each pipeline
app registers the function that gives its figures (``console.figures``). Every figure links to the
admin list that explains it and counts the rows that list would show the same user.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from console import figures as app_figures
from console.admin import overview as jobs_overview


def build(request: HttpRequest) -> dict[str, Any]:
    """The front page's overview for ``request.user``: empty for a user who may see
    nothing of it."""
    engine = jobs_overview.section(request)
    figures = [figure for provider in app_figures.providers() for figure in provider(request)]
    return {"engine": engine, "figures": figures, "shown": bool(engine or figures)}
