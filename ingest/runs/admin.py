"""Ingest runs in the admin: the hook catalogue, sources with their hooks, runs with a
live timeline of their batches, and the hook runner's circuit breakers.

Every operator action (start, cancel, retry the failed hooks, fetch again from the failed
batch) calls ``ingest.runs.services`` with the staff user and ``via="admin"``, so it is
recorded on the run like one from the API or a command. Runs and breakers are written by
the pipeline only: their pages show them and act on them, they do not edit them. Staff of
a tenant see their tenant's sources, runs and breakers, and the catalogue entries offered
to their tenant; platform operators define the catalogue and close breakers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

import jobs
from console.admin import (
    CappedCountPaginator,
    HistoryInline,
    Operation,
    ReadOnlyMixin,
    job_link,
    may_view_jobs,
    sentence,
)
from ingest.runs import breaker, catalogue, services, timeline
from ingest.runs.forms import HookForm, HookFormSet, HookTemplateForm, SourceForm
from ingest.runs.models import (
    BatchStatus,
    Hook,
    HookExecution,
    HookTemplate,
    IngestBatch,
    IngestRun,
    IngestSource,
    RunAction,
    RunnerBreaker,
    RunStatus,
)
from ingest.runs.rendering import countdown, status_badge
from tenancy.owned_admin import PlatformWritesAdmin, TenantOwnedAdmin, is_platform_operator
from tenancy.scoping import scope_queryset, tenant_scope

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldsetSpec, _ListDisplayT
    from django_stubs_ext import WithAnnotations

CSS = "ingest/runs.css"
SCRIPT = "ingest/run_live.js"


# Start a run of a source: needs ``ingest.operate_ingestrun``, like the run's own actions;
# logged on the run it started.
START = Operation(
    "start",
    "Start a run",
    "started",
    lambda source, actor, reason: services.start_ingest(source, actor=actor, via="admin"),
    IngestRun,
)
# Close a breaker by hand: a platform operator's, who knows whether the cluster is back.
CLOSE_BREAKER = Operation(
    "close",
    "Close the breaker",
    "closed",
    lambda row, actor, reason: breaker.reset(row.target, row.tenant_id, jobs.now()),
    RunnerBreaker,
    platform=True,
)


def _job_link(request: HttpRequest, job: jobs.Job) -> SafeString:
    return job_link(job.pk, viewable=may_view_jobs(request))


def _refusal(exc: services.RunRefused) -> str:
    return sentence(str(exc))


# --- sources and their hooks --------------------------------------------------------------------


class HookInline(admin.StackedInline):
    """A source's hooks: each an entry of the catalogue offered to the source's tenant,
    and the values of its parameters (the field's help lists each entry's)."""

    model = Hook
    form = HookForm
    formset = HookFormSet
    extra = 0
    fields = [("name", "position"), "template", "parameters"]

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        scope = tenant_scope(request.user)
        fixed = scope if isinstance(scope, int) and not isinstance(scope, bool) else None
        return type(formset.__name__, (formset,), {"fixed_tenant": fixed})


class _SourceCounts(TypedDict):
    hook_count: int
    running_run: int | None


@admin.register(IngestSource)
class IngestSourceAdmin(TenantOwnedAdmin, admin.ModelAdmin):
    list_display = ["name", "tenant", "kind", "hooks", "batch_size", "max_failures", "enabled", "running"]
    list_filter = ["enabled", "kind"]
    list_select_related = ["tenant"]
    search_fields = ["name"]
    form = SourceForm
    inlines = [HookInline]
    actions = ["start_runs"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[IngestSource]:
        running = IngestRun.objects.filter(source=OuterRef("pk"), status=RunStatus.RUNNING)
        sources = (
            super()
            .get_queryset(request)
            .annotate(hook_count=Count("hooks"), running_run=Subquery(running.values("pk")[:1]))
        )
        return scope_queryset(sources, request.user)

    @admin.display(description="hooks", ordering="hook_count")
    def hooks(self, source: WithAnnotations[IngestSource, _SourceCounts]) -> int:
        return source.hook_count

    @admin.display(description="running")
    def running(self, source: WithAnnotations[IngestSource, _SourceCounts]) -> SafeString:
        if source.running_run is None:
            return format_html("{}", "—")
        url = reverse("admin:ingest_ingestrun_change", args=[source.running_run])
        return format_html('<a href="{}">run {}</a>', url, source.running_run)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return START.permitted(request)

    @admin.action(description="Start a run of the selected sources", permissions=["operate"])
    def start_runs(self, request: HttpRequest, queryset: QuerySet[IngestSource]) -> None:
        for source in queryset:
            try:
                run = START.perform(self, request, source)
            except services.RunRefused as exc:
                self.message_user(request, f"Not started: {exc}.", messages.ERROR)
                continue
            url = reverse("admin:ingest_ingestrun_change", args=[run.pk])
            self.message_user(
                request,
                format_html('Started <a href="{}">run {}</a> of {}.', url, run.pk, source.name),
                messages.SUCCESS,
            )


# --- the hook catalogue ---------------------------------------------------------------------------


def _tenant_of(request: HttpRequest) -> int | None:
    scope = tenant_scope(request.user)
    return scope if isinstance(scope, int) and not isinstance(scope, bool) else None


class _EntryUse(TypedDict):
    used_by: int


@admin.register(HookTemplate)
class HookTemplateAdmin(PlatformWritesAdmin, admin.ModelAdmin):
    """The catalogue is the platform's: platform operators define its entries. A tenant's
    staff see the entries offered to their tenant, read only, without the fixed
    environment or which other tenants are offered them."""

    form = HookTemplateForm
    list_display = ["name", "enabled", "image", "command_display", "offered", "hook_count", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name", "description"]
    filter_horizontal = ["tenants"]
    readonly_fields = ["parameters_summary"]
    fieldsets = [
        (None, {"fields": ["name", "description", "enabled", "tenants"]}),
        ("What runs", {"fields": ["image", "command", "env", "timeout_seconds"]}),
        ("What a tenant fills", {"fields": ["parameters", "parameters_summary"]}),
        (
            "Resources (Kubernetes)",
            {"fields": [("cpu_request", "cpu_limit"), ("memory_request", "memory_limit")]},
        ),
    ]
    OPERATORS_ONLY = {"tenants", "env"}

    def get_queryset(self, request: HttpRequest) -> QuerySet[HookTemplate]:
        entries = super().get_queryset(request).annotate(used_by=Count("hooks"))
        if is_platform_operator(request):
            return entries.prefetch_related("tenants")
        tenant = _tenant_of(request)
        return entries.none() if tenant is None else entries.offered_to(tenant)

    def get_list_display(self, request: HttpRequest) -> _ListDisplayT[Any]:
        if is_platform_operator(request):
            return self.list_display
        return [name for name in self.list_display if name not in ("offered", "hook_count")]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> _FieldsetSpec:
        if is_platform_operator(request):
            return self.fieldsets
        return [
            (title, {**options, "fields": [f for f in options["fields"] if f not in self.OPERATORS_ONLY]})
            for title, options in self.fieldsets
        ]

    @admin.display(description="command")
    def command_display(self, entry: HookTemplate) -> str:
        text = " ".join(str(arg) for arg in entry.command) if isinstance(entry.command, list) else ""
        return text if len(text) <= 120 else text[:119] + "…"

    @admin.display(description="offered to")
    def offered(self, entry: HookTemplate) -> str:
        names = [tenant.name for tenant in entry.tenants.all()]
        return ", ".join(names) if names else "every tenant"

    @admin.display(description="hooks", ordering="used_by")
    def hook_count(self, entry: WithAnnotations[HookTemplate, _EntryUse]) -> int:
        return entry.used_by

    @admin.display(description="parameters, in words")
    def parameters_summary(self, entry: HookTemplate) -> str:
        try:
            declared = catalogue.declarations(entry.parameters)
        except catalogue.Refused as exc:
            return f"not valid: {exc}"
        return "; ".join(parameter.summary() for parameter in declared) or "none"


# --- runs -----------------------------------------------------------------------------------------


def _via_admin(action: Callable[..., Any]) -> Callable[[IngestRun, Any, str], Any]:
    return lambda run, actor, reason: action(run, actor=actor, via="admin")


OPERATIONS = {
    op.name: op
    for op in [
        Operation(
            "cancel",
            "Cancel the run",
            "cancelled",
            _via_admin(services.cancel_run),
            IngestRun,
            applies=lambda run, batches: not run.finished,
            done=lambda run, _: f"Run {run.pk} cancelled.",
        ),
        Operation(
            "retry-hooks",
            "Retry the failed hooks",
            "retried",
            _via_admin(services.retry_failed_hooks),
            IngestRun,
            applies=lambda run, batches: (
                run.status != RunStatus.CANCELLED and batches[BatchStatus.HOOKS_FAILED] > 0
            ),
            done=lambda run, count: f"Run {run.pk}: the hooks of {count} batch(es) run again.",
        ),
        Operation(
            "retry-from-batch",
            "Fetch again from the failed batch",
            "fetched again",
            _via_admin(services.retry_from_failed_batch),
            IngestRun,
            applies=lambda run, batches: run.status == RunStatus.FAILED and not run.ingest_done,
            done=lambda run, sequence: f"Run {run.pk}: fetching again from batch {sequence}.",
        ),
    ]
}


def _url_name(op: Operation) -> str:
    return f"ingest_ingestrun_{op.name.replace('-', '_')}"


def operation_url(op: Operation, run: IngestRun) -> str:
    """The admin address that carries out ``op`` on ``run`` (after its confirmation)."""
    return reverse(f"admin:{_url_name(op)}", args=[run.pk])


@dataclass
class BatchRow:
    batch: IngestBatch
    executions: list[HookExecution]
    delivery: jobs.Job | None
    delivery_link: SafeString | None


class RunActionInline(HistoryInline):
    """A run's actions: who started, cancelled or retried it and through which door, and
    how it ended. Drawn inside the run's live timeline (``render``), which is fetched
    again as the run moves."""

    model = RunAction

    def status_html(self, status: str) -> SafeString:
        return status_badge(status)


@admin.register(IngestRun)
class IngestRunAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Runs are started from their source, the API or a command, and written by the
    pipeline; operators act on them through the services, and a run stays as the record
    of what was published."""

    list_display = [
        "id",
        "source",
        "tenant",
        "status_display",
        "batches",
        "records_published",
        "failures",
        "started_at",
        "started_by",
        "finished_at",
    ]
    list_display_links = ["id", "source"]
    list_filter = ["status", ("source", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["source", "tenant", "started_by"]
    sortable_by = ["id", "started_at"]
    search_fields = ["=id", "source__name"]
    search_help_text = "A run id or a source's name."
    show_full_result_count = False
    paginator = CappedCountPaginator
    change_form_template = "admin/ingest/ingestrun/change_form.html"
    actions = ["cancel_runs", "retry_failed_hooks", "retry_from_failed_batch"]
    # What never changes; where the run stands is the live timeline's (timeline.html).
    fields = readonly_fields = ("id", "source", "tenant", "started_by", "started_at", "pipeline")

    class Media:
        css = {"all": [CSS]}
        js = [SCRIPT]

    # -- who may do what --

    def get_queryset(self, request: HttpRequest) -> QuerySet[IngestRun]:
        return scope_queryset(super().get_queryset(request), request.user)

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        tenants = [("tenant", admin.RelatedOnlyFieldListFilter)] if is_platform_operator(request) else []
        return [*self.list_filter, *tenants]

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return OPERATIONS["cancel"].permitted(request)

    # -- the list --

    @admin.display(description="status", ordering="status")
    def status_display(self, run: IngestRun) -> SafeString:
        return status_badge(run.status)

    @admin.display(description="batches published / fetched")
    def batches(self, run: IngestRun) -> str:
        return f"{run.batches_published} / {run.batches_ingested}"

    @admin.display(description="hook failures")
    def failures(self, run: IngestRun) -> str:
        return f"{run.hook_failures} of {run.max_failures} allowed"

    # -- the run page: its timeline, kept live by ingest/run_live.js --

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        own = [path("<path:object_id>/timeline/", view(self.timeline_view), name="ingest_ingestrun_timeline")]
        own += [
            path(
                f"<path:object_id>/{name}/",
                view(self.operation_view),
                {"operation": name},
                name=_url_name(op),
            )
            for name, op in OPERATIONS.items()
        ]
        return own + super().get_urls()

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        run = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if run is not None and self.has_view_permission(request, run):
            context.update(self.timeline_context(request, run))
            context["timeline_url"] = reverse("admin:ingest_ingestrun_timeline", args=[run.pk])
            context["events_url"] = reverse("pipeline-events", args=[run.pipeline])
        return super().change_view(request, object_id, form_url, context)

    def timeline_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The timeline alone, for the page's script to swap in when the run's pipeline
        says something happened."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404("No such run visible to you.")
        return TemplateResponse(
            request, "admin/ingest/ingestrun/timeline.html", self.timeline_context(request, run)
        )

    def timeline_context(self, request: HttpRequest, run: IngestRun) -> dict[str, Any]:
        shown = timeline.load(run)
        batch_counts = timeline.counts(run)["batches"]
        rows = []
        for batch in shown.batches:
            delivery = shown.hook_deliveries.get(batch.pk)
            rows.append(
                BatchRow(
                    batch,
                    list(batch.hook_executions.all()),
                    delivery,
                    _job_link(request, delivery) if delivery is not None else None,
                )
            )
        operations = (
            [(op.label, operation_url(op, run)) for op in OPERATIONS.values() if op.allows(run, batch_counts)]
            if self.has_operate_permission(request)
            else []
        )
        return {
            "run": run,
            "timeline": shown,
            "rows": rows,
            "fetching": [(sequence, job, _job_link(request, job)) for sequence, job in shown.fetching],
            # The engine's error in full (its traceback) for those who may read jobs.
            "failed_job": shown.failed
            if run.status == RunStatus.FAILED and request.user.has_perm("jobs.view_job")
            else None,
            "failed_job_link": _job_link(request, shown.failed) if shown.failed is not None else None,
            "actions": RunActionInline(IngestRun, self.admin_site).render(request, run),
            "operations": operations,
            "pipeline_url": reverse("admin:jobs_job_pipeline", args=[run.pipeline])
            if request.user.has_perm("jobs.view_job")
            else "",
        }

    def operation_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """A button of the run page: the service's action, reported back on the page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404("No such run visible to you.")
        self.carry_out(request, OPERATIONS[operation], run)
        return redirect(reverse("admin:ingest_ingestrun_change", args=[run.pk]))

    def carry_out(self, request: HttpRequest, op: Operation, run: IngestRun) -> None:
        try:
            result = op.perform(self, request, run, logged=run)
        except services.RunRefused as exc:
            self.message_user(request, f"Run {run.pk}: not done. {_refusal(exc)}", messages.ERROR)
        else:
            self.message_user(request, op.reported(run, result), messages.SUCCESS)

    # -- bulk actions --

    def _bulk(self, request: HttpRequest, queryset: QuerySet[IngestRun], name: str) -> None:
        for run in queryset.order_by("id"):
            self.carry_out(request, OPERATIONS[name], run)

    @admin.action(description="Cancel the selected runs", permissions=["operate"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[IngestRun]) -> None:
        self._bulk(request, queryset, "cancel")

    @admin.action(description="Retry the failed hooks of the selected runs", permissions=["operate"])
    def retry_failed_hooks(self, request: HttpRequest, queryset: QuerySet[IngestRun]) -> None:
        self._bulk(request, queryset, "retry-hooks")

    @admin.action(
        description="Fetch the selected runs again from their failed batch", permissions=["operate"]
    )
    def retry_from_failed_batch(self, request: HttpRequest, queryset: QuerySet[IngestRun]) -> None:
        self._bulk(request, queryset, "retry-from-batch")


# --- the hook runner's circuit breakers -----------------------------------------------------------


@admin.register(RunnerBreaker)
class RunnerBreakerAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """One breaker per runner target and tenant. A tenant's staff see their own; closing
    one by hand is for platform operators, who know whether the cluster is back."""

    list_display = [
        "target",
        "tenant",
        "state_display",
        "failures",
        "window",
        "next_probe",
        "times_opened",
        "denied",
        "last_failure_display",
        "opened_at",
        "updated_at",
    ]
    list_filter = ["state"]
    list_select_related = ["tenant"]
    fields = readonly_fields = (
        "target",
        "tenant",
        "state_display",
        "failures",
        "window",
        "window_started_at",
        "opened_at",
        "next_probe",
        "cooldown_seconds",
        "probe_job",
        "probe_started_at",
        "times_opened",
        "denied",
        "last_failure",
        "updated_at",
    )
    actions = ["close_breakers"]

    class Media:
        css = {"all": [CSS]}
        js = [SCRIPT]

    def get_queryset(self, request: HttpRequest) -> QuerySet[RunnerBreaker]:
        return scope_queryset(super().get_queryset(request), request.user)

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        tenants = [("tenant", admin.RelatedOnlyFieldListFilter)] if is_platform_operator(request) else []
        return [*self.list_filter, *tenants]

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return CLOSE_BREAKER.permitted(request)

    @admin.display(description="state", ordering="state")
    def state_display(self, row: RunnerBreaker) -> SafeString:
        return status_badge(row.state, row.get_state_display())

    @admin.display(description="next probe", ordering="next_probe_at")
    def next_probe(self, row: RunnerBreaker) -> SafeString:
        if row.state == RunnerBreaker.State.CLOSED:
            return format_html("{}", "—")
        return countdown(row.next_probe_at)

    @admin.display(description="last failure")
    def last_failure_display(self, row: RunnerBreaker) -> str:
        text = row.last_failure.splitlines()[0] if row.last_failure else "—"
        return text if len(text) <= 120 else text[:119] + "…"

    @admin.action(description="Close the selected breakers (the cluster is back)", permissions=["operate"])
    def close_breakers(self, request: HttpRequest, queryset: QuerySet[RunnerBreaker]) -> None:
        rows = list(queryset.select_related("tenant").order_by("target", "tenant__name"))
        for row in rows:
            CLOSE_BREAKER.perform(self, request, row)
        closed = ", ".join(f"{row.target} for {row.tenant}" for row in rows)
        self.message_user(
            request, f"Closed: {closed}. Held-back hooks launch at their next attempt.", messages.SUCCESS
        )
