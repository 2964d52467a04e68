"""Scrape handoffs in the admin: the scraper's runs, the references it found, and each
payload's handoff to ingestion with its history.

All of it is written by the syncs and the engine's handlers, so the pages show it and
never edit it. The operator actions, a failed handoff's retry (a button on its page,
``ingest.scraping.services.retry_handoffs``) and the redrive of a selection
(``services.redrive``, previewed, bounded per transaction), name the staff user, so they
are recorded on each handoff's history like any other transition. Staff of a tenant see their tenant's rows.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Exists, F, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from console.admin import (
    HistoryInline,
    JobLinks,
    Operation,
    PageOperations,
    ReadOnlyAdmin,
    ReadOnlyInline,
    job_cell,
)
from ingest.runs.models import IngestSource
from ingest.runs.rendering import status_badge
from ingest.scraping import services
from ingest.scraping.models import (
    HandoffStatus,
    HandoffTransition,
    IngestionHandoff,
    ScrapeReference,
    ScrapeRun,
)
from tenancy.scoping import scope_queryset, tenant_scope

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

CSS = "ingest/runs.css"
RECENT_SCRAPE_RUNS = 20


def _tenant_filter(request: HttpRequest) -> list[Any]:
    """Platform operators see every tenant's rows, and may filter them by tenant."""
    return [("tenant", admin.RelatedOnlyFieldListFilter)] if tenant_scope(request.user) is True else []


def _short_hash(value: str) -> str:
    return f"{value[:12]}…"


def _run_link(run_id: int | None) -> SafeString:
    if run_id is None:
        return format_html("{}", "—")
    url = reverse("admin:ingest_ingestrun_change", args=[run_id])
    return format_html('<a href="{}">run {}</a>', url, run_id)


def _pre(text: str) -> SafeString:
    return format_html('<pre class="ingest-pre">{}</pre>', text) if text else format_html("{}", "—")


class ScopedAdmin(ReadOnlyAdmin):
    """The syncs and the handlers write these rows; the admin shows them, scoped to the
    staff user's tenant."""

    class Media:
        css = {"all": [CSS]}

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return scope_queryset(super().get_queryset(request), request.user)

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        return [*self.list_filter, *_tenant_filter(request)]


# --- scrape runs ----------------------------------------------------------------------------------


@admin.register(ScrapeRun)
class ScrapeRunAdmin(ScopedAdmin):
    list_display = [
        "run_id",
        "source",
        "syncs",
        "references_received",
        "references_changed",
        "last_sync_at",
        "last_synced_by",
        "handoffs",
    ]
    list_filter = [("source", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["source", "last_synced_by"]
    search_fields = ["=run_id"]
    search_help_text = "A scrape run's exact id."
    fields = readonly_fields = (
        "run_id",
        "tenant",
        "source",
        "syncs",
        "references_received",
        "references_changed",
        "first_sync_at",
        "last_sync_at",
        "last_synced_by",
        "handoffs",
    )

    @admin.display(description="handoffs")
    def handoffs(self, run: ScrapeRun) -> SafeString:
        params: dict[str, str | int] = {
            ScrapeRunFilter.parameter_name: run.run_id,
            "source__id__exact": run.source_id,
        }
        query = urlencode(params)
        url = reverse("admin:ingest_ingestionhandoff_changelist")
        return format_html('<a href="{}?{}">its handoffs</a>', url, query)


# --- references -----------------------------------------------------------------------------------


class HandoffColumns:
    """The columns a handoff shows wherever it is listed: its status as a badge, its
    reason in words, and its ingest run as a link."""

    @admin.display(description="status")
    def status_display(self, handoff: IngestionHandoff) -> SafeString:
        return status_badge(handoff.status)

    @admin.display(description="reason")
    def reason(self, handoff: IngestionHandoff) -> str:
        return handoff.get_reason_code_display()

    @admin.display(description="ingest run")
    def ingest_run_link(self, handoff: IngestionHandoff) -> SafeString:
        return _run_link(handoff.ingest_run_id)


class ReferenceHandoffInline(HandoffColumns, ReadOnlyInline):
    model = IngestionHandoff
    fields = readonly_fields = (
        "status_display",
        "reason",
        "hash",
        "scrape_run",
        "attempts",
        "ingest_run_link",
        "updated_at",
    )
    ordering = ["-id"]
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[IngestionHandoff]:
        return super().get_queryset(request).select_related("scrape_run")

    @admin.display(description="payload hash")
    def hash(self, handoff: IngestionHandoff) -> str:
        return _short_hash(handoff.payload_hash)


class UnhandedFilter(admin.SimpleListFilter):
    """References whose payload has no handoff: stored while the handoff tables were
    migrated back (syncs then store references only), until migrating forward hands
    them off."""

    title = "handoff"
    parameter_name = "handoff"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("none", "none for its payload")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() != "none":
            return queryset
        handed_off = IngestionHandoff.objects.filter(
            reference=OuterRef("pk"), payload_hash=OuterRef("payload_hash")
        )
        return queryset.exclude(Exists(handed_off))


@admin.register(ScrapeReference)
class ScrapeReferenceAdmin(ScopedAdmin):
    list_display = ["source", "external_id", "hash", "first_seen_at", "changed_at", "changed_in_run"]
    list_display_links = ["external_id"]
    list_filter = [("source", admin.RelatedOnlyFieldListFilter), UnhandedFilter]
    list_select_related = ["source", "changed_in"]
    search_fields = ["=external_id"]
    search_help_text = "A reference's exact external id."
    fields = readonly_fields = (
        "external_id",
        "tenant",
        "source",
        "payload_display",
        "payload_hash",
        "first_seen_at",
        "changed_at",
        "changed_in",
    )
    inlines = [ReferenceHandoffInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ScrapeReference]:
        # A page of the list never loads the payloads; the reference's page reads its own.
        return super().get_queryset(request).defer("payload")

    @admin.display(description="payload hash")
    def hash(self, reference: ScrapeReference) -> str:
        return _short_hash(reference.payload_hash)

    @admin.display(description="changed in", ordering="changed_in__run_id")
    def changed_in_run(self, reference: ScrapeReference) -> str:
        return reference.changed_in.run_id

    @admin.display(description="payload")
    def payload_display(self, reference: ScrapeReference) -> SafeString:
        return _pre(json.dumps(reference.payload, indent=2, sort_keys=True, ensure_ascii=False))


# --- handoffs -------------------------------------------------------------------------------------


class ScrapeRunFilter(admin.SimpleListFilter):
    """By the scraper's own run id, which is what an operator has in hand. The choices are
    the latest scrape runs the user may see; an older one is ``?scrape_run=<id>``."""

    title = "scrape run"
    parameter_name = "scrape_run"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        runs = scope_queryset(ScrapeRun.objects.order_by("-last_sync_at", "-id"), request.user)
        recent = dict.fromkeys(runs.values_list("run_id", flat=True)[:RECENT_SCRAPE_RUNS])
        return [(run_id, run_id) for run_id in recent]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(scrape_run__run_id=self.value()) if self.value() else queryset


class TransitionInline(HistoryInline):
    """A handoff's history: each move, its reason (the transition's kind), note and who."""

    model = HandoffTransition

    def status_html(self, status: str) -> str:
        return status or "∅"  # before its creation


class _HandoffIds(TypedDict):
    reference_external_id: str
    scraper_run_id: str


# The one handoff whose page it is a button of (a selection is redriven: ``redrive_handoffs``).
RETRY_HANDOFF = Operation(
    "retry",
    "Retry the handoff",
    "queued again",
    lambda handoff, actor, reason: services.retry_handoffs([handoff], actor=actor, via="admin"),
    IngestionHandoff,
    applies=lambda handoff: handoff.status == HandoffStatus.FAILED,
)


@admin.register(IngestionHandoff)
class IngestionHandoffAdmin(PageOperations, JobLinks, HandoffColumns, ScopedAdmin):
    list_display = [
        "id",
        "source",
        "external_id",
        "scrape_run_id_display",
        "status_display",
        "reason",
        "attempts",
        "ingest_run_link",
        "updated_at",
    ]
    list_filter = ["status", "reason_code", ("source", admin.RelatedOnlyFieldListFilter), ScrapeRunFilter]
    list_select_related = ["source"]
    sortable_by = ["id", "updated_at"]  # what the list orders by cheaply
    search_fields = ["=reference__external_id", "=scrape_run__run_id"]
    search_help_text = "A reference's exact external id, or a scrape run's exact id."
    fields = readonly_fields = (
        "id",
        "tenant",
        "source",
        "reference",
        "payload_hash",
        "scrape_run",
        "status_display",
        "reason",
        "attempts",
        "last_error_display",
        "job",
        "ingest_run",
        "created_by",
        "created_at",
        "updated_at",
    )
    inlines = [TransitionInline]
    actions = ["redrive_handoffs"]
    page_operations = (RETRY_HANDOFF,)
    refusals = (services.HandoffRefused,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[IngestionHandoff]:
        # The two ids the list shows, without loading the reference's payload.
        return (
            super()
            .get_queryset(request)
            .annotate(
                reference_external_id=F("reference__external_id"), scraper_run_id=F("scrape_run__run_id")
            )
        )

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Retry and redrive handoffs: staff granted ``ingest.operate_ingestionhandoff``."""
        return RETRY_HANDOFF.permitted(request)

    @admin.display(description="external id")
    def external_id(self, handoff: WithAnnotations[IngestionHandoff, _HandoffIds]) -> str:
        return handoff.reference_external_id

    @admin.display(description="scrape run")
    def scrape_run_id_display(self, handoff: WithAnnotations[IngestionHandoff, _HandoffIds]) -> str:
        return handoff.scraper_run_id

    @admin.display(description="last error")
    def last_error_display(self, handoff: IngestionHandoff) -> SafeString:
        return _pre(handoff.last_error)

    job = job_cell("job_id", "ingestion job")

    @admin.action(description="Redrive the selected failed handoffs", permissions=["operate"])
    def redrive_handoffs(
        self, request: HttpRequest, queryset: QuerySet[IngestionHandoff]
    ) -> HttpResponse | None:
        """A preview first (how many, the oldest, what is left as it is) with a reason
        asked; on confirmation ``services.redrive`` over the selection, source by source,
        ``BATCH`` handoffs a transaction, each recorded with the staff user and the reason
        (and the redrive in the admin log of each source)."""
        failed_before = _instant(request.POST.get("failed_before")) or services.database_now()
        sources = IngestSource.objects.filter(pk__in=queryset.order_by().values("source_id")).order_by("id")
        chosen = [
            services.RedriveFilter(source, failed_before=failed_before, handoffs=queryset)
            for source in sources
        ]
        if request.POST.get("post") != "yes":
            return self.redrive_preview(request, queryset, chosen, failed_before)
        reason = request.POST.get("reason", "").strip()[:500]
        if not reason:
            self.message_user(request, "A redrive needs a reason; nothing was changed.", messages.ERROR)
            return None
        count = batches = remaining = 0
        for each in chosen:
            # One confirmation runs a bounded number of transactions in all, whatever the
            # selection: the rest is for the next confirmation.
            left = services.REQUEST_BATCHES - batches
            if left <= 0:
                remaining += services.preview_redrive(each).count
                continue
            done = services.redrive(
                each, actor=request.user, via="admin", note=reason, batch=services.BATCH, max_batches=left
            )
            count, batches, remaining = count + done.count, batches + done.batches, remaining + done.remaining
            if done.count:
                self.log_change(
                    request, each.source, f"Redrive via the admin ({done.count} handoff(s)): {reason}"
                )
        self.message_user(
            request,
            f"{count} handoff(s) queued again, in {batches} transaction(s)."
            + (f" {remaining} more match: redrive the selection again to go on." if remaining else ""),
            messages.SUCCESS if count else messages.WARNING,
        )
        return None

    def redrive_preview(
        self,
        request: HttpRequest,
        queryset: QuerySet[IngestionHandoff],
        chosen: list[services.RedriveFilter],
        failed_before: datetime,
    ) -> TemplateResponse:
        seen = [services.preview_redrive(each) for each in chosen]
        count = sum(each.count for each in seen)
        sample = sorted((h for each in seen for h in each.sample), key=lambda h: h.pk)[: services.SAMPLE]
        context = {
            **self.admin_site.each_context(request),
            "title": "Redrive handoffs",
            "opts": self.model._meta,
            "action": "redrive_handoffs",
            "count": count,
            "skipped": queryset.count() - count,
            "sample": sample,
            "batch": services.BATCH,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across") == "1",
            "failed_before": failed_before.isoformat(),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/ingest/ingestionhandoff/redrive_confirmation.html", context)


def _instant(text: str | None) -> datetime | None:
    """The preview's bound, sent back with the confirmation."""
    parsed = parse_datetime(text or "")
    return parsed if parsed is not None and parsed.tzinfo is not None else None
