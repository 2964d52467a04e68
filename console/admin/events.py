"""Published events (the outbox) with their deliveries, read-only: a delivery is a job,
acted on from its page in the outbox console (``outbox``) or from its job's page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.admin.cells import JobLinks, job_cell
from console.admin.lists import CappedCountPaginator, pipeline_link, pretty_json
from console.admin.readonly import ReadOnlyMixin
from console.admin.rendering import STATES_CSS, error_block, state_badge
from jobs.models import Delivery, Event
from tenancy.scoping import scope_queryset


class DeliveryInline(JobLinks, ReadOnlyMixin, admin.TabularInline):
    model = Delivery
    fields = readonly_fields = (
        "delivery_link",
        "job_link",
        "job_state",
        "deliver_after",
        "job_attempts",
        "job_last_error",
    )
    extra = 0
    can_delete = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).select_related("job").order_by("subscriber")

    @admin.display(description="subscriber")
    def delivery_link(self, delivery: Delivery) -> SafeString:
        url = reverse("admin:jobs_delivery_change", args=[delivery.pk])
        return format_html('<a href="{}">{}</a>', url, delivery.subscriber)

    job_link = job_cell("job_id")

    @admin.display(description="job state")
    def job_state(self, delivery: Delivery) -> SafeString:
        return state_badge(delivery.job.state)

    @admin.display(description="deliver after")
    def deliver_after(self, delivery: Delivery) -> Any:
        return delivery.deliver_after

    @admin.display(description="attempts")
    def job_attempts(self, delivery: Delivery) -> str:
        return f"{delivery.job.attempts}/{delivery.job.max_attempts}"

    @admin.display(description="last error")
    def job_last_error(self, delivery: Delivery) -> SafeString | str:
        return error_block(delivery.job.last_error[:2000])


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tenant", "created_at", "deliveries"]
    list_select_related = ["tenant"]
    search_fields = ["=name"]  # the name index
    search_help_text = "An exact event name."
    sortable_by = ["id"]
    list_per_page = 50
    show_full_result_count = False
    paginator = CappedCountPaginator
    fields = readonly_fields = ("name", "payload_display", "tenant", "pipeline", "created_at", "created_by")
    inlines = [DeliveryInline]

    class Media:
        css = {"all": [STATES_CSS]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Event]:
        # A correlated count runs for the rows of the page only, where a JOIN ... GROUP BY
        # would aggregate the whole events table before the LIMIT.
        counts = (
            Delivery.objects.filter(event=OuterRef("pk"))
            .order_by()
            .values("event")
            .annotate(n=Count("*"))
            .values("n")
        )
        qs = (
            super()
            .get_queryset(request)
            .annotate(delivery_count=Coalesce(Subquery(counts, output_field=IntegerField()), 0))
        )
        return scope_queryset(qs, request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # events are published by code (jobs.publish)

    def has_change_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False  # the outbox is history

    @admin.display(description="deliveries")
    def deliveries(self, event: Event) -> int:
        return event.delivery_count  # type: ignore[attr-defined]

    @admin.display(description="payload")
    def payload_display(self, event: Event) -> SafeString:
        return pretty_json(event.payload)

    @admin.display(description="pipeline")
    def pipeline(self, event: Event) -> SafeString:
        return pipeline_link(event.pipeline_id)
