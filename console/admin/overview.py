"""The engine's part of the console's front page: ``console.overview``'s figures,
each linked to the admin list that explains it, over the jobs the user may see."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils.http import urlencode

from console import overview, triage
from console.admin import triage as triage_pages
from console.admin.lists import known_queues
from console.admin.rendering import format_duration
from jobs import clock, outbox
from jobs.models import Delivery, Job, JobEvent
from tenancy.scoping import scope_queryset, tenant_scope

Figure = overview.Figure


def viewable_admin(request: HttpRequest, model: type[Model]) -> admin.ModelAdmin | None:
    """The model's admin when ``request.user`` may view its list, else None: a figure is
    shown only to those who may follow its link."""
    model_admin = admin.site._registry.get(model)
    return model_admin if model_admin is not None and model_admin.has_view_permission(request) else None


def _jobs_url(**filters: str) -> str:
    url = reverse("admin:jobs_job_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def outbox_figures(request: HttpRequest) -> list[Figure]:
    """The outbox's backlog, failures and quarantine, summed over its subscribers (the
    outbox console has them one by one)."""
    delivery_admin = viewable_admin(request, Delivery)
    if delivery_admin is None:
        return []
    lags = outbox.lag(delivery_admin.get_queryset(request))
    oldest = min((lag.oldest for lag in lags if lag.oldest), default=None)
    waited = (
        "" if oldest is None else f"the oldest waits for {outbox.age((clock.now() - oldest).total_seconds())}"
    )
    url = reverse("admin:jobs_delivery_changelist")
    undelivered = sum(lag.undelivered for lag in lags)
    failing = sum(lag.failing for lag in lags)
    failed = sum(lag.failed for lag in lags)
    quarantined = sum(lag.quarantined for lag in lags)
    return [
        Figure(
            "outbox-undelivered",
            "event deliveries waiting",
            undelivered,
            f"{url}?status=undelivered",
            note=waited,
        ),
        Figure(
            "outbox-failing",
            "event deliveries retrying after an error",
            failing,
            f"{url}?status=failing",
            tone="warn" if failing else "",
        ),
        Figure(
            "outbox-failed",
            "event deliveries failed",
            failed,
            f"{url}?status=failed",
            tone="bad" if failed else "",
        ),
        Figure(
            "outbox-quarantined",
            "event deliveries quarantined",
            quarantined,
            f"{url}?status=quarantined",
            tone="warn" if quarantined else "",
        ),
    ]


def section(request: HttpRequest) -> dict[str, Any] | None:
    """The engine's figures and tables for ``request.user``, or None without the right
    to view jobs."""
    job_admin = viewable_admin(request, Job)
    if job_admin is None:
        return None
    state = overview.engine(
        scope_queryset(Job.objects.all(), request.user),
        scope_queryset(JobEvent.objects.all(), request.user, field="job__tenant"),
        known_queues(),
    )
    figures = [
        Figure(
            "failed",
            "failed in the last hour",
            state.failed,
            _jobs_url(failed_within="1h"),
            tone="bad" if state.failed else "",
            capped=state.failed_capped,
        ),
        Figure(
            "rescued",
            "rescued in the last hour",
            state.rescued,
            _jobs_url(rescued="1h"),
            tone="warn" if state.rescued else "",
        ),
        Figure(
            "stuck",
            "stuck past their lease",
            state.stuck,
            _jobs_url(stuck="yes"),
            tone="bad" if state.stuck else "",
            note="the reaper takes these back within seconds; lasting ones mean it is not running",
        ),
        Figure("running", "running now", state.running, _jobs_url(state__exact="running")),
    ]
    if state.jobs_estimate is not None and tenant_scope(request.user) is True:
        figures.append(
            Figure(
                "jobs",
                "jobs kept (estimate)",
                state.jobs_estimate,
                _jobs_url(),
                note="PostgreSQL's estimate of the table's size",
            )
        )
    queues = [
        {
            "head": head,
            "waited": format_duration(head.waited_seconds),
            "url": _jobs_url(queue=head.queue, due="yes"),
        }
        for head in state.queues
    ]
    window = triage.DEFAULT_WINDOW
    groups = [
        {
            "group": group,
            "url": triage_pages.list_url(group, window),
            "retry_url": triage_pages.retry_url(group, window),
        }
        for group in state.failure_groups
    ]
    pipelines = [
        {"pipeline": pipeline, "url": reverse("admin:jobs_job_pipeline", args=[pipeline.pipeline_id])}
        for pipeline in state.pipelines
    ]
    return {
        "figures": figures,
        "outbox": outbox_figures(request),
        "queues": queues,
        "failure_groups": groups,
        "pipelines": pipelines,
        "can_retry": job_admin.has_operate_permission(request),
        "triage_url": reverse("admin:jobs_job_triage"),
        "as_of": state.now,
    }
