"""The outbox console: the deliveries list, with each subscriber's lag above it, and the
operators' actions on a delivery (replay, quarantine, release).

Every figure comes from ``jobs.outbox`` (which the ``outbox`` command uses too) and every
action calls it, with the staff user as actor and a reason, both kept in the delivery's
job history and the admin log. Deliveries are scoped by their event's tenant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.functions import Left
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.admin.cells import JobLinks, job_cell
from console.admin.job import JobEventInline
from console.admin.lists import (
    ERROR_HEAD_CHARS,
    CappedCountPaginator,
    ChoiceFilter,
)
from console.admin.operations import Operation
from console.admin.readonly import ReadOnlyMixin
from console.admin.rendering import (
    STATES_CSS,
    action_preview,
    bulk_selection,
    error_block,
    error_cut,
    state_badge,
)
from jobs import clock, outbox, registry
from jobs.errors import IllegalTransition, InvalidArgument
from jobs.models import Delivery, Job
from tenancy.scoping import scope_queryset

Status = outbox.Status
HISTORY_LIMIT = 20


# --- actions ------------------------------------------------------------------------------


def _outbox(name: str, past: str, action: Callable[..., Delivery]) -> Operation:
    return Operation(
        name,
        name.capitalize(),
        past,
        lambda delivery, actor, reason: action(delivery, actor, reason, via="admin"),
        Delivery,
        outbox.ACTION_STATUSES[name],
        applies=lambda delivery: outbox.allows(name, delivery),
    )


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        _outbox("replay", "replayed", outbox.replay),
        _outbox("quarantine", "quarantined", outbox.quarantine),
        _outbox("release", "released", outbox.release),
    )
}


# --- the list ---------------------------------------------------------------------------


class SubscriberFilter(admin.SimpleListFilter):
    """Subscribers from the handler registry, never a DISTINCT over the deliveries; one
    no longer registered can still be filtered with ``?subscriber=name``."""

    title = "subscriber"
    parameter_name = "subscriber"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = {handler.name for handler in registry.all_handlers() if handler.subscribes}
        value = self.value()
        if value:
            names.add(value)
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(subscriber=self.value()) if self.value() else queryset


class StatusFilter(ChoiceFilter):
    title = "status"
    parameter_name = "status"
    options = dict(Status.choices)

    def narrow(self, queryset: QuerySet, value: str) -> QuerySet:
        return queryset.filter(outbox.where(value))


class DeliveryChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet:
        # A page of rows reads neither payload nor whole tracebacks.
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .defer("event__payload", "job__payload", "job__result", "job__last_error")
            .annotate(error_head=Left("job__last_error", ERROR_HEAD_CHARS))
        )


def filtered_url(**params: str) -> str:
    return f"{reverse('admin:jobs_delivery_changelist')}?{urlencode(params)}"


def lag_rows(deliveries: QuerySet[Delivery]) -> list[dict[str, Any]]:
    """The table above the list: each subscriber's figures with the filtered list behind
    each one."""
    now = clock.now()
    rows = []
    for lag in outbox.lag(deliveries):

        def link(status: str, subscriber: str = lag.subscriber) -> str:
            return filtered_url(subscriber=subscriber, status=status)

        rows.append(
            {
                "subscriber": lag.subscriber,
                "figures": [
                    ("undelivered", lag.undelivered, link(Status.UNDELIVERED)),
                    ("oldest", outbox.age(lag.oldest_seconds(now)), link(Status.UNDELIVERED)),
                    ("failing", lag.failing, link(Status.FAILING)),
                    ("failed", lag.failed, link(Status.FAILED)),
                    ("quarantined", lag.quarantined, link(Status.QUARANTINED)),
                ],
            }
        )
    return rows


class DeliveryJobHistory(JobEventInline):
    """The delivery's job's history under the delivery's page: its newest state changes
    and the outbox actions, by whom, through which door and why."""

    limit = HISTORY_LIMIT


@admin.register(Delivery)
class DeliveryAdmin(JobLinks, ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "event_link",
        "subscriber",
        "status_display",
        "attempts_display",
        "age_display",
        "error_display",
    ]
    list_filter = [SubscriberFilter, StatusFilter]
    list_select_related = ["event", "job"]
    sortable_by = ["id"]  # any other order would sort the whole matching set
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a count per filter choice reads every delivery
    paginator = CappedCountPaginator
    change_list_template = "admin/jobs/delivery/change_list.html"
    change_form_template = "admin/jobs/delivery/change_form.html"
    actions = ["replay_deliveries", "quarantine_deliveries", "release_deliveries"]
    fields = readonly_fields = (
        "event_link",
        "subscriber",
        "status_display",
        "job_link",
        "attempts_display",
        "deliver_after",
        "age_display",
        "last_error_display",
        "quarantined_at",
        "quarantined_by",
        "quarantine_reason",
    )

    class Media:
        css = {"all": [STATES_CSS]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return scope_queryset(super().get_queryset(request), request.user, field="event__tenant")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DeliveryChangeList

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return OPERATIONS["replay"].permitted(request)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # deliveries are history
        return actions

    # -- columns and fields --

    @admin.display(description="event")
    def event_link(self, delivery: Delivery) -> SafeString:
        url = reverse("admin:jobs_event_change", args=[delivery.event_id])
        return format_html('<a href="{}">{} #{}</a>', url, delivery.event.name, delivery.event_id)

    @admin.display(description="status")
    def status_display(self, delivery: Delivery) -> SafeString:
        return state_badge(outbox.status_of(delivery))

    @admin.display(description="attempts")
    def attempts_display(self, delivery: Delivery) -> str:
        return f"{delivery.job.attempts}/{delivery.job.max_attempts}"

    @admin.display(description="age")
    def age_display(self, delivery: Delivery) -> str:
        """Since the event was published."""
        return outbox.age((clock.now() - delivery.event.created_at).total_seconds())

    @admin.display(description="last error")
    def error_display(self, delivery: Delivery) -> str | SafeString:
        return error_cut(getattr(delivery, "error_head", None) or "")

    job_link = job_cell("job_id")

    @admin.display(description="deliver after")
    def deliver_after(self, delivery: Delivery) -> str:
        return f"{timezone.localtime(delivery.deliver_after):%Y-%m-%d %H:%M:%S}"

    @admin.display(description="last error")
    def last_error_display(self, delivery: Delivery) -> str | SafeString:
        return error_block(delivery.job.last_error)

    # -- the console and the delivery's page --

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            "title": "Outbox: deliveries",
            "lag": lag_rows(self.get_queryset(request)),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        delivery = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if delivery is not None:
            context["history"] = DeliveryJobHistory(Job, self.admin_site).render(
                request, delivery.job, heading=True
            )
        if delivery is not None and self.has_operate_permission(request):
            context["operations"] = [op for op in OPERATIONS.values() if op.allows(delivery)]
        return super().change_view(request, object_id, form_url, context)

    def get_urls(self) -> list[URLPattern]:
        # Ahead of the defaults: "<path:object_id>/" would otherwise swallow them.
        operations = [
            path(
                f"<path:object_id>/{op.name}/",
                self.admin_site.admin_view(self.operation_view),
                {"operation": op.name},
                name=f"jobs_delivery_{op.name}",
            )
            for op in OPERATIONS.values()
        ]
        return operations + super().get_urls()

    def operation_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """A delivery's button: the confirmation page asking for the reason, then the
        action, reported on the delivery's page (a refusal names why)."""
        if not self.has_operate_permission(request):
            raise PermissionDenied
        delivery = self.get_object(request, unquote(object_id))
        if delivery is None:
            raise Http404(f"No delivery {object_id} here.")
        op = OPERATIONS[operation]
        if request.method != "POST" or request.POST.get("post") != "yes":
            allowed = op.allows(delivery)
            return self.confirmation(
                request, op, [delivery] if allowed else [], [] if allowed else [delivery]
            )
        try:
            self.apply(request, op, delivery, request.POST.get("reason", ""))
        except (IllegalTransition, InvalidArgument) as exc:
            self.message_user(request, f"Delivery {delivery.pk} was not {op.past}: {exc}.", messages.ERROR)
        else:
            self.message_user(request, f"Delivery {delivery.pk} {op.past}.", messages.SUCCESS)
        return redirect(reverse("admin:jobs_delivery_change", args=[delivery.pk]))

    def apply(self, request: HttpRequest, op: Operation, delivery: Delivery, reason: str) -> Delivery:
        """The outbox action (its job's history names the actor and the reason) and the
        admin log entry, committed together."""
        changed: Delivery = op.perform(self, request, delivery, reason)
        return changed

    # -- bulk actions --

    @admin.action(description="Replay selected finished deliveries", permissions=["operate"])
    def replay_deliveries(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> HttpResponse | None:
        return self.bulk(request, queryset, OPERATIONS["replay"])

    @admin.action(description="Quarantine selected deliveries", permissions=["operate"])
    def quarantine_deliveries(
        self, request: HttpRequest, queryset: QuerySet[Delivery]
    ) -> HttpResponse | None:
        return self.bulk(request, queryset, OPERATIONS["quarantine"])

    @admin.action(description="Release selected quarantined deliveries", permissions=["operate"])
    def release_deliveries(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> HttpResponse | None:
        return self.bulk(request, queryset, OPERATIONS["release"])

    def bulk(self, request: HttpRequest, queryset: QuerySet[Delivery], op: Operation) -> HttpResponse | None:
        """Preview first (what will be touched, what is skipped and why) with the reason
        asked; on confirmation, one transaction per delivery."""
        selection = bulk_selection(self, request, queryset.select_related("event", "job"), op, "deliveries")
        if selection is None:
            return None
        touch, skip = selection
        if request.POST.get("post") != "yes":
            return self.confirmation(request, op, touch, skip, action=f"{op.name}_deliveries")
        reason = request.POST.get("reason", "")
        if not reason.strip():
            self.message_user(request, f"{op.label} needs a reason; nothing was changed.", messages.ERROR)
            return None
        done, refused = 0, []
        for delivery in touch:
            try:
                self.apply(request, op, delivery, reason)
                done += 1
            except IllegalTransition as exc:  # changed since the preview
                refused.append(str(exc))
        self.message_user(
            request,
            f"{done} deliver{'y' if done == 1 else 'ies'} {op.past}.",
            messages.SUCCESS if done else messages.WARNING,
        )
        if skip:
            self.message_user(
                request,
                f"{len(skip)} skipped: {op.label.lower()} needs a delivery that is {' or '.join(op.states)}.",
                messages.WARNING,
            )
        for why in refused:
            self.message_user(request, f"Refused: {why}.", messages.WARNING)
        return None

    def confirmation(
        self,
        request: HttpRequest,
        op: Operation,
        touch: list[Delivery],
        skip: list[Delivery],
        action: str = "",
    ) -> TemplateResponse:
        """The job actions' confirmation page, over deliveries, with a required reason."""
        for delivery in (*touch, *skip):
            delivery.status = outbox.status_of(delivery)  # type: ignore[attr-defined]
        return action_preview(
            self,
            request,
            "admin/jobs/delivery/action_confirmation.html",
            title=f"{op.label} deliveries",
            operation=op,
            action=action,
            touch=touch,
            skip=skip,
        )
