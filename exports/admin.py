"""Exports in the admin: mappings with their entities, snapshots with their jobs and each
job's history, and the export settings.

Snapshots are made from a mapping ("Take a snapshot", which calls
``exports.services.create_snapshot`` with the staff user) and written by the workers and
the reconciliation only: their pages show them and act on them through the services
(retry a failed job, reset a claim, cancel the snapshot: the engine's retry, recovery
and cancel of the jobs' engine jobs), which record who did in the job's history; the
admin log gets an entry too. Each export job links to its engine job's page in the
console (its claims, attempts and the engine's history). A snapshot's files are listed
on its page; a local one downloads through a view that serves only files lying under
their job's destination. Staff of a tenant see their tenant's mappings and snapshots, and
their files as paths inside the snapshot (platform operators see where they are). An
entity that is a Trino query is checked as it is saved: one query, in a catalog of the
tenant's Trino binding. The bindings (each tenant's role and catalogs) and the export
settings are the platform's, changed by platform operators only; tenant staff may read
their own binding.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Q, QuerySet, Sum
from django.forms.models import BaseInlineFormSet
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
)
from django.shortcuts import redirect
from django.template.defaultfilters import filesizeformat
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
    register_job_subject,
)
from console.admin import sentence as _sentence
from exports import entity_sql, services, subjects
from exports.datasets import DATASETS
from exports.models import (
    JOB_FINISHED,
    SNAPSHOT_FINISHED,
    ExportConfig,
    ExportEvent,
    ExportJob,
    JobStatus,
    Mapping,
    MappingEntity,
    Snapshot,
    TrinoBinding,
)
from tenancy.owned_admin import PlatformWritesAdmin, TenantOwnedAdmin, is_platform_operator
from tenancy.scoping import scope_queryset

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups, _FieldsetSpec, _ListDisplayT
    from django.utils.datastructures import _ListOrTuple
    from django_stubs_ext import WithAnnotations


class _MappingCounts(TypedDict):
    entity_total: int
    snapshot_total: int


class _SnapshotTotals(TypedDict):
    job_total: int
    job_done: int
    row_total: int | None
    job_bytes: int | None


TAKE_SNAPSHOTS = "exports.add_snapshot"
ENTITY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")  # the model's constraint


def _dash() -> SafeString:
    return format_html("{}", "—")


def size_text(size: int | None) -> str:
    return "—" if size is None else filesizeformat(size)


def next_poll_text(job: ExportJob, now: Any) -> str:
    """When a submitted job is polled next, from the engine's clock: 'in N s' or 'due'."""
    if job.status != JobStatus.SUBMITTED or job.next_poll_at is None:
        return "—"
    seconds = math.ceil((job.next_poll_at - now).total_seconds())
    return f"in {seconds} s" if seconds > 0 else "due"


# --- mappings and their entities ------------------------------------------------------------------


def datasets_help() -> str:
    listed = "; ".join(
        f"{name}: {', '.join(column.name for column in dataset.columns)}"
        for name, dataset in sorted(DATASETS.items())
    )
    return f"Empty for a Trino query (the SQL below). The datasets' columns are {listed}."


class MappingForm(forms.ModelForm):
    # The tenant the mapping belongs to when the user may not choose it (tenant staff).
    fixed_tenant: int | None = None

    class Meta:
        model = Mapping
        fields = ["tenant", "name", "description"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.fixed_tenant is not None and not self.instance.pk:
            self.instance.tenant_id = self.fixed_tenant

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        tenant = self.fixed_tenant or getattr(data.get("tenant"), "pk", None) or self.instance.tenant_id
        name = data.get("name")
        if (
            tenant
            and name
            and Mapping.objects.filter(tenant_id=tenant, name=name).exclude(pk=self.instance.pk).exists()
        ):
            self.add_error("name", f"this tenant already has a mapping named {name!r}")
        return data


class MappingEntityForm(forms.ModelForm):
    """An entity, its columns typed as a comma-separated list; each mistake is reported
    on the field it is in."""

    dataset = forms.ChoiceField(
        label="dataset",
        required=False,
        choices=[("", "— none: a Trino query —"), *((name, name) for name in sorted(DATASETS))],
    )
    columns = forms.CharField(
        label="columns",
        max_length=10_000,
        help_text="Comma-separated, in the order the Parquet files have them.",
    )

    class Meta:
        model = MappingEntity
        fields = ["kind", "name", "position", "dataset", "sql", "catalog", "columns"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["dataset"].help_text = datasets_help()
        columns = self.instance.columns
        # "" for a new entity: an untouched extra form must not count as changed.
        self.initial["columns"] = ", ".join(columns) if isinstance(columns, list) else ""

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if not ENTITY_NAME.match(name):
            raise ValidationError(
                "letters, digits, _ . and - only, not starting with . or -: it names the files' folder"
            )
        return name

    def clean_columns(self) -> list[str]:
        names = [part.strip() for part in self.cleaned_data["columns"].split(",")]
        if not all(names):
            raise ValidationError("an empty column name: separate the names with single commas")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValidationError(f"listed twice: {', '.join(repeated)}")
        return names

    def clean_sql(self) -> str:
        sql = self.cleaned_data.get("sql") or ""
        if sql.strip():
            try:
                entity_sql.parse_query(sql)
            except entity_sql.UnsafeQuery as error:
                raise ValidationError(_sentence(str(error))) from None
        return sql

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        dataset, sql = data.get("dataset"), (data.get("sql") or "").strip()
        if dataset and sql:
            self.add_error("sql", "a dataset entity has no SQL: empty it, or choose no dataset")
        elif not dataset and not sql and not {"dataset", "sql"} & set(self.errors):
            self.add_error("dataset", "choose a dataset, or write the SQL of a Trino query")
        columns = data.get("columns")
        if dataset in DATASETS and columns:
            offered = DATASETS[dataset]
            unknown = [name for name in columns if offered.column(name) is None]
            if unknown:
                self.add_error(
                    "columns",
                    f"dataset {dataset} has no column {unknown[0]!r} "
                    f"(it has {', '.join(c.name for c in offered.columns)})",
                )
        return data


class MappingEntityFormSet(BaseInlineFormSet):
    """The mapping's entities; a Trino query's catalog, and every catalog its query
    names, must be allowed by the tenant's binding (the tenant is the mapping's, known
    only here)."""

    def clean(self) -> None:
        super().clean()
        tenant_id = self.instance.tenant_id
        if tenant_id is None:
            return  # the mapping's own form says what is missing
        binding = services.binding_of(tenant_id)
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE") or data.get("dataset") or not data.get("sql"):
                continue
            for field, problem in services.check_query_entity(data["sql"], data.get("catalog", ""), binding):
                if field not in form.errors:
                    form.add_error(field, _sentence(problem))


class MappingEntityInline(admin.StackedInline):
    model = MappingEntity
    form = MappingEntityForm
    formset = MappingEntityFormSet
    extra = 0
    fieldsets = [(None, {"fields": [("kind", "name", "position"), "dataset", "columns", "sql", "catalog"]})]


@admin.register(Mapping)
class MappingAdmin(TenantOwnedAdmin, admin.ModelAdmin):
    list_display = ["name", "description", "entity_count", "latest_snapshots", "created_at"]
    list_select_related = ["tenant"]
    search_fields = ["name"]
    form = MappingForm
    inlines = [MappingEntityInline]
    actions = ["take_snapshots"]
    change_form_template = "admin/exports/mapping/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Mapping]:
        mappings = (
            super()
            .get_queryset(request)
            .annotate(
                entity_total=Count("entities", distinct=True),
                snapshot_total=Count("snapshots", distinct=True),
            )
        )
        return scope_queryset(mappings, request.user)

    def get_list_display(self, request: HttpRequest) -> _ListDisplayT[Any]:
        shown = list(self.list_display)
        return [shown[0], "tenant", *shown[1:]] if is_platform_operator(request) else shown

    def has_snapshot_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(TAKE_SNAPSHOTS)

    @admin.display(description="entities", ordering="entity_total")
    def entity_count(self, mapping: WithAnnotations[Mapping, _MappingCounts]) -> int:
        return mapping.entity_total

    @admin.display(description="snapshots", ordering="snapshot_total")
    def latest_snapshots(self, mapping: WithAnnotations[Mapping, _MappingCounts]) -> SafeString:
        url = reverse("admin:exports_snapshot_changelist") + f"?mapping__id__exact={mapping.pk}"
        return format_html('<a href="{}">{}</a>', url, mapping.snapshot_total)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/take-snapshot/",
                view(self.take_snapshot_view),
                name="exports_mapping_take_snapshot",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "may_take_snapshot": self.has_snapshot_permission(request)}
        return super().change_view(request, object_id, form_url, context)

    def take_snapshot_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what the snapshot will hold, and the role its queries run under (the
        tenant's binding). POST: the snapshot, then its page; a mapping the service
        refuses comes back saying why."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not self.has_snapshot_permission(request):
            raise PermissionDenied
        mapping = self.get_object(request, unquote(object_id))
        if mapping is None:
            raise Http404("No such mapping visible to you.")
        if request.method == "POST":
            snapshot = self.take(request, mapping)
            if snapshot is None:
                return redirect(reverse("admin:exports_mapping_change", args=[mapping.pk]))
            return redirect(reverse("admin:exports_snapshot_change", args=[snapshot.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Take a snapshot of {mapping}",
            "mapping": mapping,
            "original": mapping,
            "binding": services.binding_of(mapping.tenant_id),
            "entities": list(mapping.entities.order_by("kind", "position", "pk")),
        }
        return TemplateResponse(request, "admin/exports/mapping/take_snapshot.html", context)

    def take(self, request: HttpRequest, mapping: Mapping) -> Snapshot | None:
        try:
            snapshot = services.create_snapshot(mapping, user=request.user, via="admin")
        except services.InvalidMapping as exc:
            self.message_user(request, f"No snapshot of {mapping}: {_sentence(str(exc))}", messages.ERROR)
            return None
        url = reverse("admin:exports_snapshot_change", args=[snapshot.pk])
        self.message_user(
            request,
            format_html(
                'Took <a href="{}">snapshot {}</a> of {}: {} job(s) queued.',
                url,
                snapshot.pk,
                mapping,
                snapshot.jobs.count(),
            ),
            messages.SUCCESS,
        )
        return snapshot

    @admin.action(description="Take a snapshot of each selected mapping", permissions=["snapshot"])
    def take_snapshots(self, request: HttpRequest, queryset: QuerySet[Mapping]) -> HttpResponse | None:
        taken = [self.take(request, mapping) for mapping in queryset.order_by("name", "pk")]
        if len(taken) == 1 and taken[0] is not None:
            return redirect(reverse("admin:exports_snapshot_change", args=[taken[0].pk]))
        return None


# --- snapshots and their jobs ---------------------------------------------------------------------


def job_label(job: ExportJob) -> str:
    return f"Job {job.pk} ({job.job_type} {job.entity_name})"


# A snapshot's operations need ``exports.operate_snapshot``, those on one of its jobs too.
JOB_OPERATIONS = {
    op.name: op
    for op in [
        Operation(
            "retry",
            "Retry",
            "will run again",
            lambda job, actor, reason: services.retry_job(job, actor, via="admin"),
            Snapshot,
            applies=lambda job: job.status == JobStatus.FAILED,
            done=lambda job, _: f"{job_label(job)} will run again.",
        ),
        Operation(
            "reset-claim",
            "Reset the claim",
            "is pending again",
            lambda job, actor, reason: services.reset_claim(job, actor, via="admin"),
            Snapshot,
            applies=lambda job: job.status == JobStatus.CLAIMED,
            done=lambda job, _: f"{job_label(job)} is pending again; its worker's reports will be refused.",
            confirm="Hand {job} back to pending now? Do this only when its worker is "
            "known to be gone: whatever it still reports is refused.",
        ),
    ]
}
CANCEL = Operation(
    "cancel",
    "Cancel the snapshot",
    "cancelled",
    lambda snapshot, actor, reason: services.cancel_snapshot(snapshot, actor, via="admin"),
    Snapshot,
    applies=lambda snapshot: snapshot.status not in SNAPSHOT_FINISHED,
    confirm="Cancel snapshot {snapshot.pk} of {snapshot.mapping}? Its {open_jobs} unfinished job(s) "
    "fail, and the queries they submitted are cancelled.",
)


def _job_url_name(op: Operation) -> str:
    return f"exports_snapshot_{op.name.replace('-', '_')}"


def _job_url(op: Operation, job: ExportJob) -> str:
    return reverse(f"admin:{_job_url_name(op)}", args=[job.snapshot_id, job.pk])


@dataclass(frozen=True)
class JobFile:
    text: str
    url: str  # empty: not a local file, shown as text


@dataclass(frozen=True)
class JobRow:
    job: ExportJob
    # Its engine job (claims, attempts, leases, the engine's history): a link to its page
    # in the console for whom may view jobs.
    engine_job: SafeString
    next_poll: str
    size: str
    files: list[JobFile]
    history: SafeString  # ExportEventInline's table
    operations: list[tuple[Operation, str]]  # each with its URL for this job


def is_local(location: str) -> bool:
    return "://" not in location or location.startswith("file://")


def _local_path(location: str) -> Path:
    return Path(location.removeprefix("file://")).resolve()


def served_file(job: ExportJob, index: int) -> Path | None:
    """The job's ``index``-th file, if it is a local file lying under the job's
    destination (symbolic links followed), else None: the files are what a worker
    reported, and a worker's word is not enough to serve a path."""
    if not 0 <= index < len(job.files) or not isinstance(job.files[index], str):
        return None
    location = job.files[index]
    if not (is_local(location) and is_local(job.destination)):
        return None
    target = _local_path(location)
    if not target.is_relative_to(_local_path(job.destination)) or not target.is_file():
        return None
    return target


def job_files(job: ExportJob, *, full: bool) -> list[JobFile]:
    """The job's files: where they are for a platform operator (``full``), else their
    paths inside the snapshot; a local one links to its download."""
    inside = services.shown_files(job)
    shown = []
    for index, location in enumerate(job.files):
        text = location if full else inside[index]
        if is_local(location):
            url = reverse("admin:exports_snapshot_file", args=[job.snapshot_id, job.pk, index])
            shown.append(JobFile(text, url))
        else:
            shown.append(JobFile(text, ""))
    return shown


class ExportEventInline(HistoryInline):
    """An export job's history, with each step's claim (generation) and worker: drawn
    under the job's row on its snapshot's page (``render``)."""

    model = ExportEvent
    extra_columns = ("generation", "worker")


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Snapshots are made from mappings and written by the workers; operators act on
    them through the services, and a snapshot stays as the record of what was exported."""

    list_display = ["id", "mapping", "status", "jobs_done", "rows", "size", "created_at", "created_by"]
    list_display_links = ["id", "mapping"]
    list_filter = ["status", ("mapping", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["mapping", "tenant", "created_by"]
    sortable_by = ["id", "created_at"]
    search_fields = ["=id", "mapping__name"]
    search_help_text = "A snapshot id or a mapping's name."
    show_full_result_count = False
    paginator = CappedCountPaginator
    change_form_template = "admin/exports/snapshot/change_form.html"
    actions = ["cancel_snapshots"]
    fields = readonly_fields = (
        "id",
        "mapping",
        "tenant",
        "status",
        "created_by",
        "created_at",
        "updated_at",
        "finished_at",
        "size",
        "node_counts",
        "edge_counts",
        "error",
    )

    # -- who may do what --

    def get_queryset(self, request: HttpRequest) -> QuerySet[Snapshot]:
        snapshots = (
            super()
            .get_queryset(request)
            .annotate(
                job_total=Count("jobs"),
                job_done=Count("jobs", filter=Q(jobs__status=JobStatus.COMPLETED)),
                row_total=Sum("jobs__row_count"),
                job_bytes=Sum("jobs__size_bytes"),
            )
        )
        return scope_queryset(snapshots, request.user)

    def get_list_display(self, request: HttpRequest) -> _ListDisplayT[Any]:
        shown = list(self.list_display)
        return [*shown[:2], "tenant", *shown[2:]] if is_platform_operator(request) else shown

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        tenants = [("tenant", admin.RelatedOnlyFieldListFilter)] if is_platform_operator(request) else []
        return [*self.list_filter, *tenants]

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return CANCEL.permitted(request)

    # -- the list --

    @admin.display(description="jobs done / total")
    def jobs_done(self, snapshot: WithAnnotations[Snapshot, _SnapshotTotals]) -> str:
        return f"{snapshot.job_done} / {snapshot.job_total}"

    @admin.display(description="rows", ordering="row_total")
    def rows(self, snapshot: WithAnnotations[Snapshot, _SnapshotTotals]) -> str:
        return "—" if snapshot.row_total is None else f"{snapshot.row_total:,}"

    @admin.display(description="size")
    def size(self, snapshot: Snapshot) -> str:
        return size_text(
            snapshot.size_bytes if snapshot.size_bytes is not None else getattr(snapshot, "job_bytes", None)
        )

    # -- the snapshot page: its jobs, their files and history, and the actions --

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        own = [
            path("<path:object_id>/cancel/", view(self.cancel_view), name="exports_snapshot_cancel"),
            path(
                "<path:object_id>/jobs/<int:job_id>/files/<int:index>/",
                view(self.file_view),
                name="exports_snapshot_file",
            ),
        ]
        own += [
            path(
                f"<path:object_id>/jobs/<int:job_id>/{name}/",
                view(self.job_operation_view),
                {"operation": name},
                name=_job_url_name(op),
            )
            for name, op in JOB_OPERATIONS.items()
        ]
        return own + super().get_urls()

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        snapshot = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if snapshot is not None and self.has_view_permission(request, snapshot):
            context.update(self.jobs_context(request, snapshot))
        return super().change_view(request, object_id, form_url, context)

    def jobs_context(self, request: HttpRequest, snapshot: Snapshot) -> dict[str, Any]:
        now, may_operate = jobs.now(), self.has_operate_permission(request)
        viewable = may_view_jobs(request)
        history = ExportEventInline(ExportJob, self.admin_site)
        rows = []
        for job in snapshot.jobs.order_by("position").annotate(event_count=Count("events")):
            operations = [
                (op, _job_url(op, job)) for op in JOB_OPERATIONS.values() if may_operate and op.allows(job)
            ]
            rows.append(
                JobRow(
                    job,
                    job_link(job.job_id, viewable=viewable),
                    next_poll_text(job, now),
                    size_text(job.size_bytes),
                    job_files(job, full=is_platform_operator(request)),
                    history.render(request, job),
                    operations,
                )
            )
        cancellable = may_operate and CANCEL.allows(snapshot)
        return {
            "job_rows": rows,
            "cancel_url": reverse("admin:exports_snapshot_cancel", args=[snapshot.pk]) if cancellable else "",
            # The snapshot's engine jobs make one pipeline: its event stream says when a
            # job moved, and the page fetches its table again then.
            "events_url": reverse("pipeline-events", args=[pipeline])
            if (pipeline := services.pipeline_of(snapshot.pk)) and snapshot.status not in SNAPSHOT_FINISHED
            else "",
        }

    def operated(self, request: HttpRequest, object_id: str) -> Snapshot:
        """The snapshot an action is about, if the user may act on it (404 if they may
        not see it)."""
        if not self.has_operate_permission(request):
            raise PermissionDenied
        snapshot = self.get_object(request, unquote(object_id))
        if snapshot is None:
            raise Http404("No such snapshot visible to you.")
        return snapshot

    def confirmation(
        self, request: HttpRequest, title: str, question: str, submit: str, **extra: Any
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "question": question,
            "submit": submit,
            **extra,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/exports/snapshot/confirm.html", context)

    def job_operation_view(
        self, request: HttpRequest, object_id: str, job_id: int, operation: str
    ) -> HttpResponse:
        """A job's button: the service's action on a POST (after a confirmation page for
        those that ask one), reported back on the snapshot's page."""
        op = JOB_OPERATIONS[operation]
        allowed = ["GET", "HEAD", "POST"] if op.confirm else ["POST"]
        if request.method not in allowed:
            return HttpResponseNotAllowed(allowed)
        snapshot = self.operated(request, object_id)
        job = snapshot.jobs.filter(pk=job_id).first()
        if job is None:
            raise Http404("No such job in this snapshot.")
        back = reverse("admin:exports_snapshot_change", args=[snapshot.pk])
        label = job_label(job)
        if request.method != "POST":
            return self.confirmation(
                request,
                f"{op.label}: {label}",
                op.confirm.format(job=label),
                f"Yes, {op.label.lower()}",
                snapshot=snapshot,
                back_url=back,
            )
        try:
            result = op.perform(
                self, request, job, logged=snapshot, detail=f"job {job.pk}, {job.entity_name}"
            )
        except services.ActionRefused as exc:
            self.message_user(request, f"{label}: not done. {_sentence(str(exc))}", messages.ERROR)
        else:
            self.message_user(request, op.reported(job, result), messages.SUCCESS)
        return redirect(back)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        snapshot = self.operated(request, object_id)
        back = reverse("admin:exports_snapshot_change", args=[snapshot.pk])
        if request.method != "POST":
            open_jobs = snapshot.jobs.exclude(status__in=JOB_FINISHED)
            return self.confirmation(
                request,
                f"Cancel snapshot {snapshot.pk}",
                CANCEL.confirm.format(snapshot=snapshot, open_jobs=open_jobs.count()),
                "Yes, cancel the snapshot",
                snapshot=snapshot,
                back_url=back,
            )
        self.cancel(request, snapshot)
        return redirect(back)

    def cancel(self, request: HttpRequest, snapshot: Snapshot) -> None:
        try:
            cancelled = CANCEL.perform(
                self, request, snapshot, logged=snapshot, detail=lambda done: f"{len(done)} job(s) failed"
            )
        except services.ActionRefused as exc:
            self.message_user(
                request, f"Snapshot {snapshot.pk}: not cancelled. {_sentence(str(exc))}", messages.ERROR
            )
            return
        if not cancelled:
            snapshot.refresh_from_db(fields=["status"])
            self.message_user(
                request,
                f"Snapshot {snapshot.pk}: nothing to cancel, it is {snapshot.status}.",
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            f"Snapshot {snapshot.pk} cancelled: {len(cancelled)} unfinished job(s) failed.",
            messages.SUCCESS,
        )

    @admin.action(description="Cancel the selected snapshots", permissions=["operate"])
    def cancel_snapshots(self, request: HttpRequest, queryset: QuerySet[Snapshot]) -> HttpResponse | None:
        selected = list(queryset.select_related("mapping").order_by("id"))
        if request.POST.get("post") != "yes":
            open_ones = [s for s in selected if s.status not in SNAPSHOT_FINISHED]
            return self.confirmation(
                request,
                "Cancel snapshots",
                f"Cancel {len(open_ones)} unfinished snapshot(s) of the {len(selected)} "
                "selected? Their unfinished jobs fail.",
                "Yes, cancel them",
                snapshots=open_ones,
                selected=selected,
                action="cancel_snapshots",
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
                back_url=reverse("admin:exports_snapshot_changelist"),
            )
        for snapshot in selected:
            self.cancel(request, snapshot)
        return None

    def file_view(self, request: HttpRequest, object_id: str, job_id: int, index: int) -> FileResponse:
        """A local file of a job, as an attachment: only one its job lists, lying under
        its destination, of a snapshot the user may see."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        snapshot = self.get_object(request, unquote(object_id))
        job = snapshot.jobs.filter(pk=job_id).first() if snapshot is not None else None
        target = served_file(job, index) if job is not None else None
        if target is None:
            raise Http404("No such file of a snapshot visible to you.")
        return FileResponse(target.open("rb"), as_attachment=True, filename=target.name)


# --- the tenants' Trino bindings -----------------------------------------------------------------


class TrinoBindingForm(forms.ModelForm):
    catalogs = forms.CharField(
        label="Allowed catalogs",
        max_length=2000,
        required=False,
        help_text="Comma-separated catalog names: the only ones this tenant's entities run in and name.",
    )

    class Meta:
        model = TrinoBinding
        fields = ["tenant", "role", "catalogs"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        catalogs = self.instance.catalogs
        self.initial["catalogs"] = ", ".join(catalogs) if isinstance(catalogs, list) else ""

    def clean_role(self) -> str:
        role = self.cleaned_data["role"].strip()
        if not CATALOG_OR_ROLE.match(role):
            raise ValidationError("letters, digits, _ . and - only: it is sent in HTTP headers")
        return role

    def clean_catalogs(self) -> list[str]:
        # Trino's catalog names are lower case.
        names = [part.strip().lower() for part in self.cleaned_data["catalogs"].split(",") if part.strip()]
        bad = [name for name in names if not CATALOG_OR_ROLE.match(name)]
        if bad:
            raise ValidationError(f"not a catalog name: {bad[0]!r} (letters, digits, _ . and -)")
        return sorted(set(names))


CATALOG_OR_ROLE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")


@admin.register(TrinoBinding)
class TrinoBindingAdmin(PlatformWritesAdmin, admin.ModelAdmin):
    """Every tenant's queries go to Trino as one shared user: the role and catalogs they
    run under are the platform's to give, so only platform operators add or change a
    binding; a tenant's staff see their own, read-only."""

    form = TrinoBindingForm
    list_display = ["tenant", "role", "catalog_list", "updated_at", "updated_by"]
    list_select_related = ["tenant", "updated_by"]
    readonly_fields = ["updated_at", "updated_by"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[TrinoBinding]:
        return scope_queryset(super().get_queryset(request), request.user)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> _FieldGroups:
        return ["tenant", "role", "catalogs", "updated_at", "updated_by"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> _ListOrTuple[str]:
        if not is_platform_operator(request):
            return ["tenant", "role", "catalog_list", "updated_at", "updated_by"]
        return ["tenant", *self.readonly_fields] if obj is not None else list(self.readonly_fields)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if not is_platform_operator(request):
            kwargs["fields"] = []
        return super().get_form(request, obj, change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> _FieldsetSpec:
        if not is_platform_operator(request):
            return [(None, {"fields": ["tenant", "role", "catalog_list", "updated_at", "updated_by"]})]
        return super().get_fieldsets(request, obj)

    @admin.display(description="allowed catalogs")
    def catalog_list(self, binding: TrinoBinding) -> str:
        return ", ".join(binding.catalogs) if isinstance(binding.catalogs, list) else "—"

    def save_model(self, request: HttpRequest, obj: TrinoBinding, form: Any, change: bool) -> None:
        assert isinstance(request.user, User)  # the admin lets only signed-in staff in
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)


# --- the export settings --------------------------------------------------------------------------


class ExportConfigForm(forms.ModelForm):
    max_duration_seconds = forms.IntegerField(
        label="maximum duration (s)",
        min_value=60,
        help_text=ExportConfig._meta.get_field("max_duration_seconds").help_text,
    )

    class Meta:
        model = ExportConfig
        fields = ["max_duration_seconds"]


@admin.register(ExportConfig)
class ExportConfigAdmin(admin.ModelAdmin):
    """One row, the platform's: every tenant's exports run under it, so only platform
    operators change it."""

    form = ExportConfigForm
    list_display = ["__str__", "max_duration_seconds", "updated_at", "updated_by"]
    fields = ["max_duration_seconds", "updated_at", "updated_by"]
    readonly_fields = ["updated_at", "updated_by"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_platform_operator(request) and super().has_change_permission(request, obj)

    # The row exists before anyone looks for it, on the list or at its address.
    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        ExportConfig.current()
        return super().changelist_view(request, extra_context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        ExportConfig.current()
        return super().change_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: ExportConfig, form: Any, change: bool) -> None:
        assert isinstance(request.user, User)  # the admin lets only signed-in staff in
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)


# What the exports' engine jobs work for, on the job pages and failure groups.
register_job_subject(subjects.SNAPSHOT_JOBS, subjects.snapshot_subjects, permission="exports.view_snapshot")
