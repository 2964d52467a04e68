"""What keeps the admin's lists cheap on millions of rows: a capped count, filters whose
choices never come from the jobs table, and searches that each hit an index."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.db.models.functions import Left
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console import triage
from console.overview import table_estimate
from jobs import clock, conf, registry
from jobs.models import Job, JobEvent, JobQuerySet, Worker

State = Job.State

# The list never loads these: a page of rows should not drag payloads out of the table.
HEAVY_JOB_FIELDS = ("payload", "result", "last_error")


# --- a paginator that never counts a whole table -----------------------------------------


class CappedCountPaginator(Paginator):
    """Counts at most ``cap`` matching rows.

    ``COUNT(*)`` over a million jobs is a full scan on every page view, and nobody pages
    through a hundred pages: they filter. When an unfiltered list passes the cap, the page
    shows PostgreSQL's own row estimate (``pg_class.reltuples``, kept by autovacuum).
    """

    cap = 10_000

    @cached_property
    def _counted(self) -> int:
        if not isinstance(self.object_list, QuerySet):
            return len(self.object_list)
        # A sliced count is COUNT(*) over a LIMITed subquery: it stops after cap + 1 rows.
        return self.object_list[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self._counted, self.cap)

    @property
    def is_capped(self) -> bool:
        return self._counted > self.cap

    @cached_property
    def estimate(self) -> int | None:
        """Rows in the whole table by PostgreSQL's estimate, for an unfiltered capped list."""
        qs = self.object_list
        if not self.is_capped or not isinstance(qs, QuerySet) or qs.query.where:
            return None
        rows = table_estimate(qs.model, qs.db)
        return max(rows, self.cap) if rows else None


# Of a deferred last_error, the list reads this much: its first line says what went wrong.
ERROR_HEAD_CHARS = 300


class JobChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .defer(*HEAVY_JOB_FIELDS)
            .annotate(error_head=Left("last_error", ERROR_HEAD_CHARS))
        )


# --- list filters ------------------------------------------------------------------------


class TypeFilter(admin.SimpleListFilter):
    """Types from the handler registry: listing them from the table would scan it.
    A type no longer registered can still be filtered with ``?type=name``."""

    title = "type"
    parameter_name = "type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in registry.names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        # jobs_job_type_state_idx (type, state, -id)
        return queryset.filter(type=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    """Queues the deployment knows of (handlers, settings, live workers), never a
    DISTINCT over the jobs table."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in sorted(known_queues())]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        # Pending jobs of a queue are served by jobs_job_claim_idx; finished ones are found by
        # walking the primary key newest first, which stops at a page for common queues.
        return queryset.filter(queue=self.value()) if self.value() else queryset


class FailedRecentlyFilter(admin.SimpleListFilter):
    title = "failed recently"
    parameter_name = "failed_within"
    windows = {
        "1h": ("in the last hour", timedelta(hours=1)),
        "24h": ("in the last 24 hours", timedelta(days=1)),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _) in self.windows.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        window = self.windows.get(self.value() or "")
        if window is None:
            return queryset
        # jobs_job_finished_idx (finished_at, partial on finished jobs); the engine's clock, so
        # "the last hour" is the same hour the engine stamped finished_at with.
        return queryset.filter(state=State.FAILED, finished_at__gte=clock.now() - window[1])


class ChoiceFilter(admin.SimpleListFilter):
    """A filter of fixed ``options`` (value: label; ``choices`` is Django's own method).
    A value not among them is refused by name rather than ignored: a link that lists
    everything while claiming a filter would mislead whoever followed it."""

    options: dict[str, str] = {}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(self.options.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value is None:
            return queryset
        if value not in self.options:
            raise IncorrectLookupParameters(
                f"{self.parameter_name}={value!r}: the choices are {', '.join(self.options)}"
            )
        return self.narrow(queryset, value)

    def narrow(self, queryset: QuerySet, value: str) -> QuerySet:
        """``queryset`` narrowed to ``value``, one of ``options``."""
        raise NotImplementedError


class RescuedFilter(ChoiceFilter):
    """Jobs the reaper took back from a dead worker: at least once (jobs_job_rescued_idx), or
    in the last hour (their rescue events, by jobs_jobevent_incident_idx)."""

    title = "rescued"
    parameter_name = "rescued"
    options = {"yes": "rescued at least once", "1h": "rescued in the last hour"}

    def narrow(self, queryset: QuerySet, value: str) -> QuerySet:
        if value == "1h":
            recent = JobEvent.objects.filter(
                kind=JobEvent.Kind.RESCUED, at__gte=clock.now() - timedelta(hours=1)
            )
            return queryset.filter(rescues__gt=0, pk__in=recent.values("job_id"))
        return queryset.filter(rescues__gt=0)


class StuckFilter(ChoiceFilter):
    """Running jobs whose lease ran out and that the reaper has not taken back yet
    (jobs_job_lease_idx): more than a few seconds of these means the reaper is not running."""

    title = "lease"
    parameter_name = "stuck"
    options = {"yes": "expired (stuck)"}

    def narrow(self, queryset: QuerySet, value: str) -> QuerySet:
        assert isinstance(queryset, JobQuerySet)  # the job admin's
        return queryset.lease_expired(clock.now())


class DueFilter(ChoiceFilter):
    """Pending jobs whose time has come: a queue's backlog, without the ones waiting out
    a backoff or scheduled for later (jobs_job_claim_idx, with the queue filter)."""

    title = "due"
    parameter_name = "due"
    options = {"yes": "due now"}

    def narrow(self, queryset: QuerySet, value: str) -> QuerySet:
        assert isinstance(queryset, JobQuerySet)  # the job admin's
        return queryset.due(clock.now())


def known_queues() -> set[str]:
    """Queues the deployment knows of (handlers, settings, live workers), never a
    DISTINCT over the jobs table."""
    known = {handler.queue for handler in registry.all_handlers()} | set(conf.queues())
    for queues in Worker.objects.values_list("queues", flat=True):
        known.update(queues or [])
    return known


class PipelineFilter(admin.SimpleListFilter):
    """Set by following a job's pipeline link; offered only while active, since listing
    the pipelines would be a DISTINCT over the whole table."""

    title = "pipeline"
    parameter_name = "pipeline"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"{value[:8]}…")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if not self.value():
            return queryset
        try:
            pipeline = uuid.UUID(self.value())
        except ValueError as exc:
            raise IncorrectLookupParameters(f"not a pipeline id: {self.value()!r}") from exc
        return queryset.filter(pipeline_id=pipeline)  # the pipeline_id index


class FailureGroupFilter(admin.SimpleListFilter):
    """The failed jobs of one failure group (``console.triage``), as
    ``?failure=<window>:<fingerprint>``: set by the triage page's counts, offered only
    while active."""

    title = "failure group"
    parameter_name = "failure"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"{value.partition(':')[0]}: {value.partition(':')[2][:8]}…")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        window, _, group = value.partition(":")
        if window not in triage.WINDOWS or not re.fullmatch("[0-9a-f]{32}", group):
            raise IncorrectLookupParameters(
                f"failure={self.value()!r}: expected <window>:<fingerprint>, a window being "
                f"one of {', '.join(triage.WINDOWS)}"
            )
        return triage.members(queryset, triage.window_start(window), group)


def job_search(term: str) -> Q:
    """Exact matches only, each served by an index: a job id (primary key), a pipeline id
    (its index), a type (jobs_job_type_state_idx), a concurrency key (jobs_job_key_idx) or the
    unique key of an unfinished job (jobs_job_one_active_per_unique_key; finished jobs' unique
    keys have no index). A substring match would scan every row."""
    term = term.strip()
    query = Q(type=term) | Q(concurrency_key=term) | Q(unique_key=term, state__in=Job.UNFINISHED)
    number = term.removeprefix("#")
    if number.isdigit() and len(number) < 19:  # a bigint
        query |= Q(pk=int(number))
    try:
        query |= Q(pipeline_id=uuid.UUID(term))
    except ValueError:
        pass
    return query


# --- display helpers -----------------------------------------------------------------------


def pretty_json(value: Any) -> SafeString:
    return format_html(
        '<pre class="job-json">{}</pre>', json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    )


def change_link(job_id: int, text: str = "") -> SafeString:
    url = reverse("admin:jobs_job_change", args=[job_id])
    return format_html('<a href="{}">{}</a>', url, text or f"#{job_id}")


def pipeline_link(pipeline_id: uuid.UUID | None) -> SafeString:
    if pipeline_id is None:
        return format_html("{}", "—")
    url = reverse("admin:jobs_job_changelist")
    return format_html(
        '<a href="{}?pipeline={}" title="All jobs of pipeline {}">{}…</a>',
        url,
        pipeline_id,
        pipeline_id,
        str(pipeline_id)[:8],
    )
