"""The job pages: a read-only list and detail, and the operator actions (recover, retry,
cancel, run now) that call the engine with the staff user as actor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString

from console.admin import dashboard
from console.admin import pipeline as pipeline_page
from console.admin import triage as triage_pages
from console.admin.history import HistoryInline
from console.admin.lists import (
    CappedCountPaginator,
    DueFilter,
    FailedRecentlyFilter,
    FailureGroupFilter,
    JobChangeList,
    PipelineFilter,
    QueueFilter,
    RescuedFilter,
    StuckFilter,
    TypeFilter,
    job_search,
    pipeline_link,
    pretty_json,
)
from console.admin.operations import (
    ACTION_OPERATIONS,
    OPERATIONS,
    TAKES_FROM_WORKER,
    Operation,
    may_operate,
    operate,
)
from console.admin.rendering import (
    STATES_CSS,
    action_preview,
    bulk_selection,
    error_block,
    error_cut,
    format_duration,
    state_badge,
)
from console.admin.subjects import subject as job_subject
from console.admin.subjects import why_with_subject
from jobs import clock
from jobs.errors import IllegalTransition
from jobs.models import Job, JobEvent
from jobs.why import explain, lease_health
from tenancy.scoping import scope_queryset, tenant_scope

State = Job.State

TIMELINE_LIMIT = 200
RELATED_LIMIT = 50


def _short_time(moment: Any) -> str | SafeString:
    """A list's timestamp in the site's time zone, to the minute: the date and the time
    each kept whole, so that a narrow column breaks between them (states.css)."""
    if not moment:
        return "—"
    local = timezone.localtime(moment)
    return format_html(
        '<span class="job-when">{}</span> <span class="job-when">{}</span>',
        f"{local:%Y-%m-%d}",
        f"{local:%H:%M}",
    )


def scoped_jobs(request: HttpRequest) -> QuerySet[Job]:
    return scope_queryset(Job.objects.all(), request.user)


# --- jobs ------------------------------------------------------------------------------------


class JobEventInline(HistoryInline):
    """A job's history: its state changes and the operators' actions, each with its
    attempt and worker. The progress steps (the only rows with a progress) are folded
    into one line above the table, the latest's: a long ingest writes a hundred of them,
    which would bury the one row that matters (a rescue, an operator's action)."""

    model = JobEvent
    ordering = ["id"]  # jobs_jobevent_job_idx
    limit = TIMELINE_LIMIT
    extra_columns = ("attempt", "worker")

    def rows(self, request: HttpRequest) -> QuerySet[JobEvent]:
        return super().rows(request).exclude(kind=JobEvent.Kind.PROGRESS)

    def status_html(self, status: str) -> SafeString:
        return state_badge(status)

    def notes(self, request: HttpRequest, parent: Model, hidden: int) -> list[str | SafeString]:
        notes = super().notes(request, parent, hidden)
        steps = JobEvent.objects.filter(job_id=parent.pk, kind=JobEvent.Kind.PROGRESS)
        last = steps.order_by("-id").first()
        if last is None:
            return notes
        count = steps.count()
        text = " ".join(
            filter(
                None,
                [
                    f"{last.progress_done:,}/{last.progress_total:,}" if last.progress_total else "",
                    last.message[:200],
                ],
            )
        )
        moment = timezone.localtime(last.at).strftime("%Y-%m-%d %H:%M:%S")
        notes.append(
            format_html(
                '<span class="job-progress-folded">{} progress step{} folded; the latest at {}: {}</span>',
                f"{count:,}",
                "" if count == 1 else "s",
                moment,
                text,
            )
        )
        return notes


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    # Narrow enough for 1,440 px beside the filters: the queue and the creation and start
    # times are on the job's page (the queue is a filter); the error says why a row needs
    # a look. Long values are cut with an ellipsis and shown whole on hover (states.css).
    list_display = [
        "id",
        "type",
        "state_display",
        "attempts_display",
        "progress_display",
        "error_display",
        "pipeline",
        "tenant_display",
        "finished",
        "duration",
    ]
    list_display_links = ["id", "type"]
    list_filter = [
        "state",
        TypeFilter,
        QueueFilter,
        DueFilter,
        FailedRecentlyFilter,
        RescuedFilter,
        StuckFilter,
        PipelineFilter,
        FailureGroupFilter,
        "tenant",
    ]
    list_select_related = ["tenant"]
    # Only the primary key: any other ordering would sort the whole matching set.
    sortable_by = ["id"]
    # Facet counts would be a COUNT per choice over the whole table.
    show_facets = admin.ShowFacets.NEVER
    search_fields = ["id", "type", "unique_key", "concurrency_key", "pipeline_id"]
    search_help_text = (
        "A job id, a pipeline id, or an exact type, concurrency key or unique key (of an unfinished job)."
    )
    list_per_page = 50
    show_full_result_count = False
    paginator = CappedCountPaginator
    change_form_template = "admin/jobs/job/change_form.html"
    actions = ["recover_jobs", "retry_jobs", "cancel_jobs", "run_jobs_now"]
    inlines = [JobEventInline]

    class Media:
        css = {"all": [STATES_CSS]}

    fieldsets = [
        (None, {"fields": ["id", "type", "queue", "priority", "state_display", "tenant", "created_by"]}),
        (
            "Attempts",
            {"fields": ["attempts_display", "run_after", "rescues", "error_kind", "last_error_display"]},
        ),
        ("Progress", {"fields": ["progress_display", "progress_message"]}),
        ("Data", {"fields": ["payload_display", "result_display"]}),
        ("Keys", {"fields": ["pipeline", "concurrency_key", "is_current", "unique_key", "pending_key"]}),
        (
            "Lease",
            {
                "fields": ["locked_by", "locked_at", "heartbeat_at", "lease_expires_at"],
                "classes": ["collapse"],
            },
        ),
        ("Times", {"fields": ["created_at", "started_at", "finished_at", "duration"]}),
    ]
    readonly_fields = [name for _, options in fieldsets for name in options["fields"]]

    # -- who may do what --

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return scope_queryset(super().get_queryset(request), request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are enqueued by code and the API

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False  # state changes go through the engine, by the operator actions

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # A job's history is the audit of what ran and who acted on it: nobody deletes
        # it by hand. Operators cancel; retention prunes finished jobs (JOBS_RETENTION).
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return may_operate(request)

    def permitted_operations(self, request: HttpRequest) -> list[Operation]:
        return list(OPERATIONS.values()) if self.has_operate_permission(request) else []

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # see has_delete_permission
        return actions

    def get_list_filter(self, request: HttpRequest) -> Sequence[Any]:
        # A tenant's staff see one tenant: offering the others would only leak their names.
        if tenant_scope(request.user) is True:
            return self.list_filter
        return [spec for spec in self.list_filter if spec != "tenant"]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        if not search_term.strip():
            return queryset, False
        return queryset.filter(job_search(search_term)), False

    # -- columns and fields --

    @admin.display(description="state")
    def state_display(self, job: Job) -> SafeString:
        return state_badge(job.state)

    @admin.display(description="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="tenant", ordering="tenant__name")
    def tenant_display(self, job: Job) -> str | SafeString:
        if job.tenant is None:
            return "—"
        return format_html('<span class="job-cut" title="{}">{}</span>', job.tenant, job.tenant)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, job: Job) -> str | SafeString:
        return _short_time(job.finished_at)

    @admin.display(description="last error")
    def error_display(self, job: Job) -> str | SafeString:
        return error_cut(getattr(job, "error_head", None) or "")  # JobChangeList's

    @admin.display(description="progress")
    def progress_display(self, job: Job) -> str | SafeString:
        if job.progress_total:
            percent = 100 * job.progress_done / job.progress_total
            text = f"{job.progress_done:,}/{job.progress_total:,} ({percent:.0f}%)"
        elif job.progress_done:
            text = f"{job.progress_done:,}"
        else:
            return "—"
        return format_html('<span title="{}">{}</span>', job.progress_message, text)

    @admin.display(description="pipeline")
    def pipeline(self, job: Job) -> SafeString:
        """The pipeline page, and the list filtered to the pipeline."""
        page = reverse("admin:jobs_job_pipeline", args=[job.pipeline_id])
        return format_html(
            '<a href="{}" title="The pipeline page">graph</a> · {}', page, pipeline_link(job.pipeline_id)
        )

    @admin.display(description="duration")
    def duration(self, job: Job) -> str:
        """Finished: start to finish. Running: the time so far."""
        if job.duration_seconds is not None:
            return format_duration(job.duration_seconds)
        if job.state == State.RUNNING and job.started_at:
            return f"{format_duration((clock.now() - job.started_at).total_seconds())} so far"
        return "—"

    @admin.display(description="payload")
    def payload_display(self, job: Job) -> SafeString:
        return pretty_json(job.payload)

    @admin.display(description="result")
    def result_display(self, job: Job) -> SafeString | str:
        return "—" if job.result is None else pretty_json(job.result)

    @admin.display(description="last error")
    def last_error_display(self, job: Job) -> SafeString | str:
        return error_block(job.last_error)

    # -- the detail page --

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if job is not None:
            context.update(self.detail_context(request, job))
        return super().change_view(request, object_id, form_url, context)

    def detail_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        """The why line, what the job works for, the lease, the history, related jobs and
        the legal operations."""
        subject = job_subject(request, job)
        return {
            "why": why_with_subject(job, explain(job), subject),
            "subject": subject,
            "lease": lease_health(job),
            "operations": [op for op in self.permitted_operations(request) if op.allows(job)],
            # The newest history row the page is drawn with (its history is the inline,
            # JobEventInline): job_detail.js reloads the page for any later one.
            "last_event_id": job.events.order_by("-id").values_list("id", flat=True).first() or 0,
            **self.related_jobs(request, job),
        }

    def related_jobs(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        """Parent and children; the pipeline by its pages, not its jobs listed here."""
        visible = scoped_jobs(request).only("id", "type", "state", "parent_id").order_by("id")
        parent = visible.filter(pk=job.parent_id).first() if job.parent_id else None
        children = list(visible.filter(parent=job)[: RELATED_LIMIT + 1])
        return {
            "parent_job": parent,
            "child_jobs": children[:RELATED_LIMIT],
            "more_children": len(children) > RELATED_LIMIT,
            "pipeline_jobs": visible.filter(pipeline_id=job.pipeline_id).count(),
            "pipeline_page": reverse("admin:jobs_job_pipeline", args=[job.pipeline_id]),
            "pipeline_url": f"{reverse('admin:jobs_job_changelist')}?pipeline={job.pipeline_id}",
        }

    def get_urls(self) -> list[URLPattern]:
        # Ahead of the defaults: "<path:object_id>/" would otherwise swallow them.
        view = self.admin_site.admin_view
        pipelines = [
            path("pipeline/<uuid:pipeline_id>/", view(self.pipeline_view), name="jobs_job_pipeline"),
            path(
                "pipeline/<uuid:pipeline_id>/graph/",
                view(self.pipeline_graph_view),
                name="jobs_job_pipeline_graph",
            ),
        ]
        operations = [
            path(
                f"<path:object_id>/{op.name}/",
                self.admin_site.admin_view(self.operation_view),
                {"operation": op.name},
                name=f"jobs_job_{op.name}",
            )
            for op in OPERATIONS.values()
        ]
        return dashboard.urls(self) + triage_pages.urls(self) + pipelines + operations + super().get_urls()

    def pipeline_view(self, request: HttpRequest, pipeline_id: Any) -> HttpResponse:
        return pipeline_page.page_view(self, request, pipeline_id)

    def pipeline_graph_view(self, request: HttpRequest, pipeline_id: Any) -> HttpResponse:
        return pipeline_page.graph_view(self, request, pipeline_id)

    def operation_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """A job's button (detail or pipeline page): one engine transition, reported back
        on the page named by ``next`` (or the job's own), or as JSON to a script asking
        for it, which then shows the change from the job's event stream."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404(f"No job {object_id} here.")
        op = OPERATIONS[operation]
        health = lease_health(job)
        if (
            op.name in TAKES_FROM_WORKER
            and health is not None
            and health.alive
            and request.POST.get("confirm") != "yes"
        ):
            return self.confirm_operation(request, op, job, health.text)
        try:
            operate(self, request, op, job, request.POST.get("reason", ""))
        except IllegalTransition as exc:
            done, text = False, f"Job {job.pk} was not {op.past}: {exc}."
        else:
            done, text = True, f"Job {job.pk} {op.past}."
        if "application/json" in request.headers.get("Accept", ""):
            return JsonResponse({"job": job.pk, "ok": done, "message": text}, status=200 if done else 409)
        self.message_user(request, text, messages.SUCCESS if done else messages.ERROR)
        return redirect(self.next_url(request) or reverse("admin:jobs_job_change", args=[job.pk]))

    def confirm_operation(self, request: HttpRequest, op: Operation, job: Job, lease: str) -> HttpResponse:
        """The job's worker is alive: say so, and ask again (a page, or a 409 a script
        turns into a confirm dialog and posts again with ``confirm=yes``)."""
        text = (
            f"Job {job.pk} is running: {lease}. {op.label} it anyway? The worker is not "
            f"stopped; its result, if it comes, will be refused."
        )
        if "application/json" in request.headers.get("Accept", ""):
            return JsonResponse({"job": job.pk, "ok": False, "confirm": True, "message": text}, status=409)
        context = {
            **self.admin_site.each_context(request),
            "title": f"{op.label} job {job.pk}?",
            "opts": self.model._meta,
            "original": job,
            "operation": op,
            "message": text,
            "reason": request.POST.get("reason", ""),
            "next": self.next_url(request) or "",
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/jobs/job/operation_confirmation.html", context)

    def next_url(self, request: HttpRequest) -> str | None:
        """The page to return to after an operation, if it is one of this site's."""
        target = request.POST.get("next", "")
        safe = url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        return target if target and safe else None

    # -- bulk actions --

    @admin.action(description="Recover selected running jobs", permissions=["operate"])
    def recover_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.bulk(request, queryset, "recover_jobs")

    @admin.action(description="Retry selected failed or cancelled jobs", permissions=["operate"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.bulk(request, queryset, "retry_jobs")

    @admin.action(description="Cancel selected pending or running jobs", permissions=["operate"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.bulk(request, queryset, "cancel_jobs")

    @admin.action(description="Run selected pending jobs now", permissions=["operate"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.bulk(request, queryset, "run_jobs_now")

    def bulk(self, request: HttpRequest, queryset: QuerySet[Job], action: str) -> HttpResponse | None:
        """Preview first (what will be touched, what is skipped and why); on confirmation
        run the engine job by job, each with its own history row and log entry."""
        op = ACTION_OPERATIONS[action]
        selection = bulk_selection(self, request, queryset.select_related("tenant"), op, "jobs")
        if selection is None:
            return None
        touch, skip = selection
        if request.POST.get("post") != "yes":
            return self.confirmation(request, action, touch, skip)
        self.carry_out(request, op, touch, skipped=len(skip))
        return None

    def confirmation(
        self, request: HttpRequest, action: str, touch: list[Job], skip: list[Job]
    ) -> TemplateResponse:
        op = ACTION_OPERATIONS[action]
        return action_preview(
            self,
            request,
            "admin/jobs/job/action_confirmation.html",
            title=f"{op.label} jobs",
            operation=op,
            action=action,
            touch=touch,
            skip=skip,
        )

    def carry_out(self, request: HttpRequest, op: Operation, jobs: list[Job], *, skipped: int) -> None:
        reason = request.POST.get("reason", "")
        done = refused = 0
        for job in jobs:
            try:
                operate(self, request, op, job, reason)
                done += 1
            except IllegalTransition:
                refused += 1  # its state changed since the preview
        self.message_user(
            request, f"{done} job(s) {op.past}.", messages.SUCCESS if done else messages.WARNING
        )
        if skipped or refused:
            since = f" ({refused} changed state since the preview)" if refused else ""
            self.message_user(
                request,
                f"{skipped + refused} job(s) skipped: their state does not allow {op.label.lower()}{since}.",
                messages.WARNING,
            )
