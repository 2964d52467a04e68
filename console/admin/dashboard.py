"""The operators' dashboard page in the admin: per job type throughput, durations,
failures, retries and rescues over a window, as a table and as server-rendered SVG
charts, plus the oldest due jobs and the jobs stuck past their lease.

The figures come from ``console.dashboard.board``, the same computation as
``GET /api/jobs/dashboard/``, over querysets narrowed to the user's tenant exactly as
the API narrows them. The page is complete without JS; a ``<meta refresh>`` reloads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from console import dashboard, throttling
from console.admin import charts
from console.admin.rendering import format_duration
from jobs.models import Job, JobEvent
from tenancy.scoping import scope_queryset

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

DEFAULT_WINDOW = "1h"
REFRESH_SECONDS = 30
WINDOW_LABELS = {"15m": "15 minutes", "1h": "Hour", "24h": "Day", "7d": "Week"}
# Failures red, retries amber, rescues purple: the colours of trouble on every panel.
MEDIAN, FAILED, RETRIED, RESCUED = "#2f855a", "#c53030", "#b7791f", "#6b46c1"


@dataclass(frozen=True)
class TypePanel:
    """One job type on the page: its window figures, formatted, and its charts (SVG)."""

    type: str
    figures: dashboard.TypeFigures | None
    p50: str
    p95: str
    failure_rate: str
    charts: list[SafeString]


@dataclass(frozen=True)
class ListedJob:
    """A row of the oldest-due or stuck list: the job and how long (formatted)."""

    job: Job
    age: str


def urls(model_admin: ModelAdmin[Job]) -> list[URLPattern]:
    """The dashboard's route, for ``JobAdmin.get_urls`` (``admin:jobs_job_dashboard``);
    ``admin_view`` sends anonymous and non-staff users to the login page."""

    def view(request: HttpRequest) -> TemplateResponse:
        return dashboard_view(model_admin, request)

    return [path("dashboard/", model_admin.admin_site.admin_view(view), name="jobs_job_dashboard")]


def dashboard_view(model_admin: ModelAdmin[Job], request: HttpRequest) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    wait = throttling.dashboard_wait(request)
    if wait is not None:
        return throttled(model_admin, request, wait)
    window = request.GET.get("window", DEFAULT_WINDOW)
    if window not in dashboard.WINDOWS:
        messages.warning(request, f"Unknown window {window!r}: showing the last hour.")
        window = DEFAULT_WINDOW
    board = dashboard.board(
        window,
        jobs=scope_queryset(Job.objects.all(), request.user),
        events=scope_queryset(JobEvent.objects.all(), request.user, field="job__tenant"),
    )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Jobs dashboard",
        "opts": model_admin.model._meta,
        "window": window,
        "windows": [(name, WINDOW_LABELS.get(name, name)) for name in dashboard.WINDOWS],
        "board": board,
        "panels": panels(board),
        "queue_lags": [(lag, format_duration(lag.lag_seconds)) for lag in board.figures.queues],
        "oldest_due": [ListedJob(row.job, format_duration(row.age_seconds)) for row in board.oldest_due],
        "stuck": [ListedJob(row.job, format_duration(row.overdue_seconds)) for row in board.stuck],
        "refresh_seconds": REFRESH_SECONDS,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/jobs/dashboard.html", context)


def throttled(model_admin: ModelAdmin[Job], request: HttpRequest, wait: float) -> TemplateResponse:
    """429 with Retry-After: this user loaded dashboards (page or API) over their rate."""
    seconds = max(1, math.ceil(wait))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Jobs dashboard",
        "opts": model_admin.model._meta,
        "wait_seconds": seconds,
    }
    response = TemplateResponse(request, "admin/jobs/dashboard_throttled.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response


def panels(board: dashboard.Board) -> list[TypePanel]:
    """A panel per job type with its three charts: throughput, durations, incidents."""
    figures = {row.type: row for row in board.figures.types}
    labels = [bucket_label(start, board) for start in board.buckets.starts]
    stride = stride_name(board.buckets.stride)
    result = []
    for number, series in enumerate(board.series):
        built = [
            throughput_chart(series, labels, stride),
            duration_chart(series, labels, stride),
            incident_chart(series, labels, stride),
        ]
        svgs = [
            mark_safe(charts.render(chart, f"chart-{number}-{index}"))  # charts.render escapes all text
            for index, chart in enumerate(built)
        ]
        result.append(_panel(series.type, figures.get(series.type), svgs))
    return result


def _panel(name: str, figures: dashboard.TypeFigures | None, svgs: list[SafeString]) -> TypePanel:
    rate = figures.failure_rate if figures else None
    return TypePanel(
        type=name,
        figures=figures,
        p50=format_duration(figures.p50_seconds if figures else None),
        p95=format_duration(figures.p95_seconds if figures else None),
        failure_rate="—" if rate is None else f"{100 * rate:.1f} %",
        charts=svgs,
    )


def stride_name(stride: timedelta) -> str:
    """'minute', '5 minutes', 'hour', '6 hours': how the charts name their interval."""
    seconds = int(stride.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return unit if count == 1 else f"{count} {unit}s"
    return f"{seconds} seconds"


def bucket_label(start: datetime, board: dashboard.Board) -> str:
    local = timezone.localtime(start)
    if board.buckets.stride.total_seconds() >= 3600 * 6:
        return local.strftime("%a %H:%M")
    return local.strftime("%H:%M")


def throughput_chart(series: dashboard.TypeSeries, labels: list[str], stride: str) -> charts.Chart:
    return charts.Chart(
        title=f"{series.type}: jobs finished per {stride}",
        description=(
            f"Bars per {stride} interval: {sum(series.finished)} jobs finished, "
            f"{sum(series.failed)} of them failed."
        ),
        labels=labels,
        series=[charts.Series("finished", series.finished), charts.Series("failed", series.failed, FAILED)],
        x_label=f"interval start ({stride} each)",
        y_label="jobs finished",
    )


def duration_chart(series: dashboard.TypeSeries, labels: list[str], stride: str) -> charts.Chart:
    ran = [value for value in series.p95_seconds if value is not None]
    return charts.Chart(
        title=f"{series.type}: duration per {stride} (p50 and p95)",
        description=(
            f"Median and 95th percentile run time, first start to finish, of the "
            f"jobs finished in each {stride}; the slowest interval's p95 was "
            f"{format_duration(max(ran)) if ran else 'not measured'}."
        ),
        labels=labels,
        series=[
            charts.Series("p50", series.p50_seconds, MEDIAN),
            charts.Series("p95", series.p95_seconds, RETRIED),
        ],
        x_label=f"interval start ({stride} each)",
        y_label="seconds",
        kind="line",
    )


def incident_chart(series: dashboard.TypeSeries, labels: list[str], stride: str) -> charts.Chart:
    return charts.Chart(
        title=f"{series.type}: retries and rescues per {stride}",
        description=(
            f"{sum(series.retries)} retries scheduled and {sum(series.rescues)} jobs "
            f"rescued from dead workers in this window."
        ),
        labels=labels,
        series=[
            charts.Series("retries", series.retries, RETRIED),
            charts.Series("rescues", series.rescues, RESCUED),
        ],
        x_label=f"interval start ({stride} each)",
        y_label="events",
    )
