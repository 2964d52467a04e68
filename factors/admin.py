"""The CO2 calculator in the admin: units, reports with their modules and stats, entries,
factors (stale ones filterable) and emissions; upload forms that start the same
pipelines as ``/sync/…``, through the same services, each an ``Operation``: refused
without its ``operate_<model>`` permission, and recorded in the admin log on the job it
started, naming who.

Rows are written by the calculator's own paths only (jobs, services), so these pages
show them and start operations; they do not edit rows in place. Staff of a tenant see
their tenant's units, reports and entries; factors are shared reference data, and
uploading them (or syncing units) is for platform operators.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from django import forms as django_forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

import jobs
from console.admin import (
    CappedCountPaginator,
    JobLinks,
    Operation,
    ReadOnlyAdmin,
    job_cell,
    job_link,
    may_view_jobs,
    register_job_subject,
)
from factors import conf, queries, services, subjects
from factors.forms import EntriesUploadForm, FactorsUploadForm, UnitSyncForm
from factors.models import (
    CarbonReport,
    DataEntry,
    Emission,
    EmissionFactor,
    EntryLoad,
    ReportModule,
    Unit,
    Upload,
)
from intake.uploads import body_limit
from tenancy.operators import may_operate
from tenancy.scoping import scope_queryset, tenant_scope

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups
    from django.utils.datastructures import _ListOrTuple

    # A mixin goes before ``admin.ModelAdmin``: what it calls through ``super()`` is its.
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object


def _badge(recalculating: bool, module: ReportModule) -> SafeString:
    """The module's "Recalculating…" badge; on a report page factors/report_live.js keeps it
    (and the module's figures) live, by the data attributes."""
    text, busy = ("Recalculating…", "1") if recalculating else ("Up to date", "0")
    return format_html(
        '<span class="recalc-badge" data-busy="{}" data-report="{}" data-module="{}">{}</span>',
        busy,
        module.report_id,
        module.pk,
        text,
    )


def _pipeline_url(result: services.Dispatched) -> str:
    return reverse("admin:jobs_job_pipeline", args=[result.pipeline_id])


def _pipeline_message(result: services.Dispatched) -> SafeString:
    rows = f" ({result.rows:,} rows)" if result.rows is not None else ""
    return format_html(
        'Started job #{}{} — <a href="{}">follow its pipeline</a>.',
        result.job.pk,
        rows,
        _pipeline_url(result),
    )


class ClassificationShown(_ModelAdmin):
    """A classification as ``key: value`` lines (keys sorted, every part escaped) on the
    list and the change page: operators read codes, not a JSON dump."""

    def get_fields(self, request: HttpRequest, obj: Any = None) -> _FieldGroups:
        fields = super().get_fields(request, obj)
        return ["classification_shown" if name == "classification" else name for name in fields]

    @admin.display(description="classification")
    def classification_shown(self, row: DataEntry | EmissionFactor) -> SafeString:
        values = row.classification
        if not isinstance(values, dict) or not values:
            return format_html("{}", "—")
        lines = format_html_join(
            "",
            '<div class="classification-line">{}: {}</div>',
            sorted((str(k), str(v)) for k, v in values.items()),
        )
        return format_html('<div class="classification">{}</div>', lines)


# The admin actions, each logged on the rows it was asked for.
RECOMPUTE_STATS = Operation(
    "recompute_stats",
    "Recompute the stats",
    "recomputed",
    lambda reports, actor, reason: services.recompute_stats([r.pk for r in reports], actor=actor),
    CarbonReport,
)
RECALCULATE = Operation(
    "recalculate",
    "Recalculate the emissions",
    "recalculated",
    lambda types, actor, reason: [services.recalculate_emissions(t, actor=actor).job.pk for t in types],
    EmissionFactor,
    platform=True,
)
REMOVE_LOADS = Operation(
    "remove",
    "Remove the rows",
    "removed",
    lambda ids, actor, reason: services.remove_loads(ids, actor=actor),
    EntryLoad,
    platform=True,
)
# The upload pages, each called with its form's cleaned values.
SYNC_UNITS = Operation(
    "sync_units",
    "Sync units",
    "synced",
    lambda data, actor, reason: services.sync_units(
        data["year"],
        source=data.get("file"),
        filename=getattr(data.get("file"), "name", ""),
        url=data["url"],
        actor=actor,
    ),
    Unit,
    platform=True,
)
UPLOAD_ENTRIES = Operation(
    "upload_entries",
    "Upload entries CSV",
    "uploaded",
    lambda data, actor, reason: services.dispatch_csv(
        data["module"], data["data_entry_type"], data["file"], filename=data["file"].name, actor=actor
    ),
    DataEntry,
)
UPLOAD_FACTORS = Operation(
    "upload_factors",
    "Upload factors CSV",
    "uploaded",
    lambda data, actor, reason: services.upload_factors(
        data["data_entry_type"], data["file"], filename=data["file"].name, actor=actor
    ),
    EmissionFactor,
    platform=True,
)


def _started_job(result: services.Dispatched) -> jobs.Job:
    return result.job


def _upload_detail(what: str) -> Callable[[services.Dispatched], str]:
    """The log entry's detail: what was asked for, and how many rows it holds."""
    return lambda result: (
        what + ("" if result.rows is None else f", {result.rows:,} row{'s' * (result.rows != 1)}")
    )


class ReadOnly(JobLinks, ReadOnlyAdmin):
    """Rows written by the calculator's own paths: shown, not edited here; the shared
    factors and units are the platform's, so their actions are platform operators'."""

    platform_operation = True

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return may_operate(request.user, self.model, platform=self.platform_operation)


class UploadViews(ReadOnly):
    """A changelist with an upload page that starts a pipeline through a service.

    Each admin below says how: ``upload_form(request)`` builds its bound form,
    ``upload_operation`` calls the service with the form's values (``upload_values``
    makes of them what it takes) and returns what it dispatched, and ``upload_what``
    says what was asked for, in the admin log; ``upload_kind`` names the files it takes,
    whose size limit is its page's body limit.
    """

    upload_operation: Operation
    upload_label = ""
    upload_intro = ""
    upload_kind = ""

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.model._meta.app_label}_{self.model._meta.model_name}_upload"
        view = body_limit(partial(conf.max_bytes, self.upload_kind))(
            self.admin_site.admin_view(self.upload_view)
        )
        return [path("upload/", view, name=name), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        context = dict(extra_context or {})
        if self.may_upload(request):
            meta = self.model._meta
            context.update(
                upload_url=reverse(f"admin:{meta.app_label}_{meta.model_name}_upload"),
                upload_label=self.upload_label,
            )
        return super().changelist_view(request, context)

    def may_upload(self, request: HttpRequest) -> bool:
        return self.upload_operation.permitted(request)

    def upload_values(self, data: dict[str, Any]) -> dict[str, Any]:
        return data

    def upload_what(self, data: dict[str, Any]) -> str:
        upload = data.get("file")
        return f"{data['data_entry_type']} from {upload.name}" if upload else data["data_entry_type"]

    def after_upload(self, request: HttpRequest, result: services.Dispatched) -> str:
        """The pipeline page, to watch the upload go through; the list for staff who may
        not see jobs."""
        if request.user.has_perm("jobs.view_job"):
            return _pipeline_url(result)
        meta = self.model._meta
        return reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")

    def upload_view(self, request: HttpRequest) -> HttpResponse:
        if not self.may_upload(request):
            raise PermissionDenied
        form = self.upload_form(request)  # type: ignore[attr-defined]
        rejected = None
        if request.method == "POST" and form.is_valid():
            try:
                values = self.upload_values(form.cleaned_data)
                result = self.upload_operation.perform(
                    self,
                    request,
                    values,
                    logged=_started_job,
                    detail=_upload_detail(self.upload_what(values)),
                )
            except services.UploadRejected as exc:
                rejected = exc.report.as_dict()
            except services.InvalidRequest as exc:
                for field, problems in exc.errors.items():
                    form.add_error(field if field in form.fields else None, problems)
            except services.AlreadyRunning as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, _pipeline_message(result), messages.SUCCESS)
                return HttpResponseRedirect(self.after_upload(request, result))
        example = form.example() if hasattr(form, "example") else None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": self.upload_label,
            "form": form,
            "rejected": rejected,
            "intro": self.upload_intro,
            "submit": self.upload_label,
            "example": example,
        }
        return TemplateResponse(request, "admin/factors/upload.html", context)


def _bound(
    form_class: Callable[..., django_forms.Form], request: HttpRequest, **kwargs: Any
) -> django_forms.Form:
    if request.method == "POST":
        return form_class(request.POST, request.FILES, **kwargs)
    return form_class(**kwargs)


# --- units -------------------------------------------------------------------------------------------


@admin.register(Unit)
class UnitAdmin(UploadViews):
    list_display = ["code", "name", "parent", "tenant", "last_synced_year", "synced_by"]
    list_filter = ["last_synced_year", "tenant"]
    list_select_related = ["parent", "tenant"]
    search_fields = ["code", "name"]
    fields = readonly_fields = (
        "code",
        "name",
        "parent",
        "tenant",
        "last_synced_year",
        "synced_by",
        "created_at",
        "updated_at",
    )
    change_list_template = "admin/factors/unit/change_list.html"
    upload_operation = SYNC_UNITS
    upload_label = "Sync units"
    upload_kind = "units"
    upload_intro = (
        "Apply the organisation directory of a year: units are created or updated "
        "by code, and each listed unit gets its report for that year."
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Unit]:
        return scope_queryset(super().get_queryset(request), request.user)

    synced_by = job_cell("last_synced_job_id", "synced by")

    def upload_form(self, request: HttpRequest) -> django_forms.Form:
        return _bound(UnitSyncForm, request)

    def upload_values(self, data: dict[str, Any]) -> dict[str, Any]:
        """Without a file or a URL, the directory's configured address (as the form says)."""
        url = data.get("url") or (None if data.get("file") else conf.units_url() or None)
        return {**data, "url": url}

    def upload_what(self, data: dict[str, Any]) -> str:
        upload = data.get("file")
        return f"{data['year']} from {upload.name if upload else data['url']}"


# --- reports and modules -----------------------------------------------------------------------------


def _totals(stats: dict[str, Any]) -> str:
    return f"{stats.get('entries', 0):,} entries, {stats.get('kg_co2e', '0')} kg CO2e"


class ModuleInline(admin.TabularInline):
    model = ReportModule
    fields = readonly_fields = (
        "module_type",
        "entries",
        "kg_co2e",
        "without_factor",
        "status",
        "stats_updated_at",
    )
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        self._busy = queries.recalculating(obj.modules.values_list("pk", flat=True)) if obj else set()
        return super().get_formset(request, obj, **kwargs)

    @admin.display(description="entries")
    def entries(self, module: ReportModule) -> int:
        return module.stats.get("entries", 0)

    @admin.display(description="kg CO2e")
    def kg_co2e(self, module: ReportModule) -> str:
        return module.stats.get("kg_co2e", "0")

    @admin.display(description="without factor")
    def without_factor(self, module: ReportModule) -> int:
        return module.stats.get("without_factor", 0)

    @admin.display(description="status")
    def status(self, module: ReportModule) -> SafeString:
        return _badge(module.pk in getattr(self, "_busy", set()), module)


class ReportForm(django_forms.ModelForm):
    class Meta:
        model = CarbonReport
        fields = ["unit", "year"]


@admin.register(CarbonReport)
class CarbonReportAdmin(admin.ModelAdmin):
    list_display = ["__str__", "unit", "year", "entries", "kg_co2e", "without_factor", "stats_updated_at"]
    list_filter = ["year"]
    list_select_related = ["unit"]
    search_fields = ["unit__code", "unit__name"]
    actions = ["recompute_stats"]
    form = ReportForm
    show_full_result_count = False

    class Media:
        # The modules' badges and figures follow the bulk jobs live (a report page only).
        css = {"all": ["factors/recalc.css"]}
        js = ["console/live.js", "factors/report_live.js"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[CarbonReport]:
        return scope_queryset(super().get_queryset(request), request.user, field="unit__tenant")

    def get_inlines(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return [] if obj is None else [ModuleInline]  # a new report's modules come with it

    def get_fields(self, request: HttpRequest, obj: Any = None) -> _FieldGroups:
        return [*self._fields(obj)]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> _ListOrTuple[str]:
        return [] if obj is None else self._fields(obj)

    def _fields(self, obj: CarbonReport | None) -> list[str]:
        return (
            ["unit", "year"]
            if obj is None
            else ["unit", "year", "stats_table", "stats_updated_at", "created_by"]
        )

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return RECOMPUTE_STATS.permitted(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a report holds entries: they are replaced by uploads, not deleted here

    def save_model(self, request: HttpRequest, obj: CarbonReport, form: Any, change: bool) -> None:
        """Opening a report goes through the service, which also creates its modules."""
        opened = services.open_report(obj.unit, obj.year, actor=request.user)
        obj.pk, obj.stats = opened.pk, opened.stats

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        return None  # the modules are the service's; the inline is read-only

    @admin.display(description="entries")
    def entries(self, report: CarbonReport) -> int:
        return report.stats.get("entries", 0)

    @admin.display(description="kg CO2e")
    def kg_co2e(self, report: CarbonReport) -> str:
        return report.stats.get("kg_co2e", "0")

    @admin.display(description="without factor")
    def without_factor(self, report: CarbonReport) -> int:
        return report.stats.get("without_factor", 0)

    @admin.display(description="stats")
    def stats_table(self, report: CarbonReport) -> SafeString:
        rows = [
            (t, v["entries"], f"{v['quantity']} {v['unit']}", v["kg_co2e"], v["without_factor"])
            for t, v in sorted(report.stats.get("by_type", {}).items())
        ]
        body = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows)
        return format_html(
            "<p>{}</p><table><thead><tr><th>type</th><th>entries</th><th>quantity</th>"
            "<th>kg CO2e</th><th>without factor</th></tr></thead><tbody>{}</tbody></table>",
            _totals(report.stats),
            body,
        )

    @admin.action(
        description="Recompute the stats of the selected reports (aggregation jobs)", permissions=["operate"]
    )
    def recompute_stats(self, request: HttpRequest, queryset: QuerySet[CarbonReport]) -> None:
        reports = list(queryset)
        started = RECOMPUTE_STATS.perform(self, request, reports, logged=reports)
        self.message_user(request, f"{started} aggregation job(s) queued.", messages.SUCCESS)


# --- entries, factors, emissions ---------------------------------------------------------------------


@admin.register(DataEntry)
class DataEntryAdmin(ClassificationShown, UploadViews):
    list_display = [
        "id",
        "module",
        "data_entry_type",
        "quantity",
        "unit",
        "classification_shown",
        "kg_co2e",
        "source",
        "row_number",
        "written_by",
        "created_by",
    ]
    list_filter = ["source", "data_entry_type", "module__module_type", "year"]
    list_select_related = ["module__report__unit", "emission", "created_by"]
    sortable_by = ["id"]
    paginator = CappedCountPaginator
    search_fields = ["=id", "=module__report__unit__code"]
    search_help_text = "An entry id or an exact unit code."
    change_list_template = "admin/factors/dataentry/change_list.html"
    upload_operation = UPLOAD_ENTRIES
    upload_label = "Upload entries CSV"
    upload_kind = "entries"
    upload_intro = (
        "Starts csv_ingest → emission_recalc → aggregation. A file with any bad row "
        "is refused whole, with the first errors listed."
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[DataEntry]:
        # What the report reads: rows of an ingest still loading or failed are listed
        # under entry loads, not here.
        return scope_queryset(
            super().get_queryset(request).current(), request.user, field="module__report__unit__tenant"
        )

    platform_operation = False  # a tenant's staff upload their tenant's entries

    def may_upload(self, request: HttpRequest) -> bool:
        return tenant_scope(request.user) is not False and super().may_upload(request)

    @admin.display(description="kg CO2e")
    def kg_co2e(self, entry: DataEntry) -> str:
        emission = getattr(entry, "emission", None)
        return "— (no factor)" if emission is None else str(emission.kg_co2e)

    written_by = job_cell("job_id")

    def upload_form(self, request: HttpRequest) -> django_forms.Form:
        reports = scope_queryset(CarbonReport.objects.all(), request.user, field="unit__tenant")
        return _bound(EntriesUploadForm, request, reports=reports)

    def upload_values(self, data: dict[str, Any]) -> dict[str, Any]:
        """The report's module of the chosen type, looked up before the upload is read."""
        module = ReportModule.objects.filter(report=data["report"], module_type=data["module_type"]).first()
        if module is None:
            raise services.InvalidRequest({"module_type": ["this report has no such module"]})
        return {**data, "module": module}

    def upload_what(self, data: dict[str, Any]) -> str:
        return f"{data['data_entry_type']} into {data['module']} from {data['file'].name}"


class StaleFilter(admin.SimpleListFilter):
    title = "in the latest upload"
    parameter_name = "stale"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "No: stale"), ("no", "Yes")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.stale()
        if self.value() == "no":
            return queryset.filter(is_stale=False)
        return queryset


@admin.register(EmissionFactor)
class EmissionFactorAdmin(ClassificationShown, UploadViews):
    list_display = [
        "id",
        "data_entry_type",
        "year",
        "classification_shown",
        "value",
        "unit",
        "source",
        "stale",
        "seen_in",
    ]
    list_filter = [StaleFilter, "data_entry_type", "year", "source"]
    search_fields = ["source"]
    actions = ["recalculate"]
    change_list_template = "admin/factors/emissionfactor/change_list.html"
    upload_operation = UPLOAD_FACTORS
    upload_label = "Upload factors CSV"
    upload_kind = "factors"
    upload_intro = (
        "Factors are upserted in place (ids kept, entries stay linked); factors of "
        "the file's type and years that it leaves out become stale (other years are "
        "left as they are); the emissions of the type are recalculated."
    )

    @admin.display(description="stale", boolean=True)
    def stale(self, factor: EmissionFactor) -> bool:
        return factor.is_stale

    seen_in = job_cell("last_seen_job_id", "last seen in")

    def upload_form(self, request: HttpRequest) -> django_forms.Form:
        return _bound(FactorsUploadForm, request)

    @admin.action(
        description="Recalculate the emissions of the selected factors' types", permissions=["operate"]
    )
    def recalculate(self, request: HttpRequest, queryset: QuerySet[EmissionFactor]) -> None:
        factors = list(queryset)
        types = sorted({factor.data_entry_type for factor in factors})
        jobs = RECALCULATE.perform(self, request, types, logged=factors, detail=", ".join(types))
        self.message_user(
            request,
            f"Recalculation queued for {', '.join(types)} (jobs {', '.join(map(str, jobs))}).",
            messages.SUCCESS,
        )


@admin.register(Emission)
class EmissionAdmin(ReadOnly):
    list_display = ["data_entry", "factor", "kg_co2e", "computed_by", "computed_at"]
    list_select_related = ["data_entry", "factor"]
    sortable_by = []
    paginator = CappedCountPaginator
    search_fields = ["=data_entry__id"]
    search_help_text = "A data entry id."

    def get_queryset(self, request: HttpRequest) -> QuerySet[Emission]:
        return scope_queryset(
            super().get_queryset(request), request.user, field="data_entry__module__report__unit__tenant"
        )

    @admin.display(description="computed by")
    def computed_by(self, emission: Emission) -> SafeString:
        if not emission.job_id:
            return format_html("{}", "an edit")
        return job_link(emission.job_id, viewable=getattr(emission, "jobs_viewable", False))


@admin.register(Upload)
class UploadAdmin(ReadOnly):
    """Staged files waiting for their ingest (or kept for the retry of a failed one)."""

    list_display = ["filename", "kind", "rows", "tenant", "created_at", "created_by"]
    list_filter = ["kind", "tenant"]
    list_select_related = ["tenant", "created_by"]
    fields = ["id", "kind", "filename", "rows", "columns", "tenant", "created_at", "created_by"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Upload]:
        return scope_queryset(super().get_queryset(request), request.user)


@admin.register(EntryLoad)
class EntryLoadAdmin(ReadOnly):
    """The rows of each bulk ingest, and whether the report reads them: a load is read
    once current; loading, abandoned and replaced ones are kept out of sight."""

    list_display = [
        "ingest",
        "module",
        "data_entry_type",
        "source",
        "state",
        "created_at",
        "current_since",
        "replaced_at",
    ]
    list_filter = ["state", "source", "data_entry_type"]
    list_select_related = ["module__report__unit"]
    search_fields = ["=job__id", "=module__report__unit__code"]
    search_help_text = "An ingest job id or an exact unit code."
    actions = ["remove"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[EntryLoad]:
        return scope_queryset(
            super().get_queryset(request), request.user, field="module__report__unit__tenant"
        )

    ingest = job_cell("job_id", "ingest", ordering="job_id")

    @admin.action(
        description="Remove the rows of the selected loads now (unread ones only)", permissions=["operate"]
    )
    def remove(self, request: HttpRequest, queryset: QuerySet[EntryLoad]) -> None:
        loads = list(queryset.exclude(state=EntryLoad.State.CURRENT))
        ids = [load.job_id for load in loads]
        if not ids:
            self.message_user(
                request, "Current loads are read by the reports: nothing to remove.", messages.WARNING
            )
            return
        job = REMOVE_LOADS.perform(self, request, ids, logged=loads)
        self.message_user(
            request,
            format_html(
                "Removal of {} load(s) queued ({}); loads still being written are kept.",
                len(ids),
                job_link(job.pk, viewable=may_view_jobs(request)),
            ),
            messages.SUCCESS,
        )


# What the factors jobs work for, on the job pages and failure groups.
register_job_subject(subjects.MODULE_JOBS, subjects.module_subjects, permission="factors.view_carbonreport")
