"""Market data in the admin: the feeds (their token kept secret), the freshness board an
operator reads first, the gap-fill run from it, and the rows behind the board.

The board (``marketfeed/board/``) shows, for each feed the user may see, each dataset's
status, a strip of the last 30 market dates saying which days have bars, the recent
daily batches and loads, and a gap-fill form. It reads each of these with one query for
all the feeds, never one per feed or per day. The gap-fill (``marketfeed/<id>/gap-fill/``)
previews first (a dry run: the days it would fetch, the API calls, the loads already
covering some days), then queues through ``market.services.gap_fill`` with the
staff user, which records the action. The reload (``marketfeed/<id>/reload/``) loads
chosen days again whether or not they have bars (a restatement): its preview lists each
day of a range (trading or not, its bars, the load covering it) with the days to fetch
ticked, and the confirmation, with its required reason, goes through
``market.services.reload``. Batches, loads, freshness rows and operator
actions are written by the jobs and the services only: their pages show them. Staff of
a tenant see their tenant's feeds and the rows of those feeds.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import httpx
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, F, Model, OrderBy, QuerySet, Window
from django.db.models.functions import RowNumber
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

import jobs
from console.admin import (
    HistoryInline,
    JobLinks,
    Operation,
    ReadOnlyAdmin,
    ReadOnlyInline,
    job_cell,
    register_job_subject,
)
from console.admin import sentence as _sentence
from intake import http_sources
from market import freshness, services, subjects
from market.models import (
    ACTIVE_LOAD,
    DailyBar,
    DailyBatch,
    Dataset,
    DayLoad,
    MarketAction,
    MarketFeed,
    SourceFreshness,
    TradingDay,
)
from market.rendering import status_badge
from tenancy.owned_admin import TenantOwnedAdmin, is_platform_operator
from tenancy.scoping import scope_queryset

CSS = ["market/market.css"]
STRIP_DAYS = 30
RECENT_PER_FEED = 10
GAP_FILL_DEFAULT_DAYS = 7
LISTED_DAYS = 20  # days named in a gap-fill's message; the rest are counted
MASK = "••••"
ACTIONS_SHOWN = 20  # a feed's newest actions on its page


def masked(token: str) -> str:
    """The token as the pages show it: its last four characters at most, and none of a
    short one, whose last four would give most of it away."""
    return MASK + token[-4:] if len(token) >= 12 else MASK


def _pre(text: str) -> SafeString:
    return format_html('<pre class="market-pre">{}</pre>', text) if text else format_html("{}", "—")


def _first_line(text: str, most: int = 120) -> str:
    line = text.splitlines()[0] if text else "—"
    return line if len(line) <= most else line[: most - 1] + "…"


def _days(days: Iterable[date]) -> str:
    days = list(days)
    named = ", ".join(day.isoformat() for day in days[:LISTED_DAYS])
    return named + (f" and {len(days) - LISTED_DAYS} more" if len(days) > LISTED_DAYS else "")


# --- feeds --------------------------------------------------------------------------------------


class FeedForm(forms.ModelForm):
    """The token is a secret: its input never shows the stored one, and left empty on a
    change it keeps it."""

    # The tenant the feed belongs to when the user may not choose it (tenant staff).
    fixed_tenant: int | None = None

    api_url = forms.URLField(
        label="API URL", assume_scheme="https", max_length=MarketFeed._meta.get_field("api_url").max_length
    )
    token = forms.CharField(
        label="Token",
        required=False,
        max_length=MarketFeed._meta.get_field("token").max_length,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )

    class Meta:
        model = MarketFeed
        fields = ["tenant", "name", "api_url", "token", "exchange", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial.pop("token", None)  # never in the page, not even as a form's initial
        if self.instance.pk:
            self.fields["token"].help_text = (
                f"Stored: {masked(self.instance.token)}. Leave "
                "empty to keep it; type a new one to replace it."
            )
        else:
            self.fields["token"].help_text = "Sent in every call's body; never shown again."
        if self.fixed_tenant is not None and not self.instance.pk:
            self.instance.tenant_id = self.fixed_tenant

    def clean_token(self) -> str:
        token = self.cleaned_data.get("token") or ""
        if token:
            return token
        if not self.instance.pk:
            raise ValidationError("A new feed needs its token.")
        url = self.cleaned_data.get("api_url")
        if url and httpx.URL(url).host != httpx.URL(self.instance.api_url).host:
            # Else whoever may edit the feed could send its token to a host of theirs.
            raise ValidationError("The API's host changed: type the token again.")
        return self.instance.token

    def clean_api_url(self) -> str:
        url = self.cleaned_data["api_url"]
        problem = http_sources.check(url)
        if problem:
            raise ValidationError(f"{url} {problem}")
        return url

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        tenant = self.fixed_tenant or getattr(data.get("tenant"), "pk", None) or self.instance.tenant_id
        name = data.get("name")
        if (
            tenant
            and name
            and MarketFeed.objects.filter(tenant_id=tenant, name=name).exclude(pk=self.instance.pk).exists()
        ):
            self.add_error("name", f"this tenant already has a feed named {name!r}")
        return data


class GapFillForm(forms.Form):
    start = forms.DateField(label="From", widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"))
    end = forms.DateField(
        label="To (included)", widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")
    )


class ReloadForm(GapFillForm):
    """A range to preview; confirmed, the days ticked in it (``day``, each a date)."""

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        chosen = []
        for value in self.data.getlist("day") if hasattr(self.data, "getlist") else []:
            try:
                chosen.append(date.fromisoformat(value))
            except ValueError:
                raise ValidationError(f"{value!r} is not a day (YYYY-MM-DD).") from None
        start, end = data.get("start"), data.get("end")
        if start and end and any(not start <= day <= end for day in chosen):
            raise ValidationError(f"A day ticked is outside {start} … {end}.")
        data["days"] = chosen
        return data


def reload_form(feed: MarketFeed, today: date, data: Any = None) -> ReloadForm:
    """The reload's range, by default the last week up to today."""
    initial = {"start": today - timedelta(days=GAP_FILL_DEFAULT_DAYS - 1), "end": today}
    return ReloadForm(data, initial=initial, auto_id=f"reload{feed.pk}-%s")


def gap_fill_form(feed: MarketFeed, today: date, data: Any = None) -> GapFillForm:
    """The gap-fill form of ``feed`` (its own ids: the board has one per feed), by default
    over the last week up to today."""
    initial = {"start": today - timedelta(days=GAP_FILL_DEFAULT_DAYS - 1), "end": today}
    return GapFillForm(data, initial=initial, auto_id=f"feed{feed.pk}-%s")


@dataclass(frozen=True)
class StripDay:
    """A day of a feed's strip: what the calendar and the bars say of it."""

    day: date
    state: str  # filled, missing, non_trading, unknown
    rows: int
    loading: bool

    LABELS = {"filled": "filled", "missing": "missing", "non_trading": "non-trading", "unknown": "unknown"}
    MARKS = {"filled": "✓", "missing": "✗", "non_trading": "·", "unknown": "?"}

    @property
    def label(self) -> str:
        return self.LABELS[self.state]

    @property
    def mark(self) -> str:
        return "↻" if self.loading else self.MARKS[self.state]

    @property
    def title(self) -> str:
        text = f"{self.day:%Y-%m-%d %a}: {self.label}"
        if self.state == "filled":
            text += f", {self.rows:,} row{'s' if self.rows != 1 else ''}"
        return text + (", loading" if self.loading else "")


LEGEND = [StripDay(date.min, state, 0, False) for state in StripDay.LABELS]


@dataclass
class FeedBoard:
    feed: MarketFeed
    sources: list[services.SourceStatus]
    strip: list[StripDay]
    batches: list[DailyBatch]
    loads: list[DayLoad]
    gap_fill: GapFillForm | None

    @property
    def overall(self) -> str:
        return freshness.overall([source.status for source in self.sources])


def strips(feeds: list[MarketFeed], first: date, last: date) -> dict[int, list[StripDay]]:
    """Each feed's days from ``first`` to ``last``: three queries for all of them (the
    calendar, the bars counted per day, the active loads)."""
    ids = [feed.pk for feed in feeds]
    exchange = {feed.pk: feed.exchange for feed in feeds}
    calendar = {
        (feed_id, day): is_open
        for feed_id, ex, day, is_open in TradingDay.objects.filter(
            feed_id__in=ids, cal_date__range=(first, last)
        ).values_list("feed_id", "exchange", "cal_date", "is_open")
        if ex == exchange[feed_id]
    }
    bars = {
        (row["feed_id"], row["trade_date"]): row["rows"]
        for row in DailyBar.objects.filter(feed_id__in=ids, trade_date__range=(first, last))
        .order_by()
        .values("feed_id", "trade_date")
        .annotate(rows=Count("*"))
    }
    loading = set(
        DayLoad.objects.filter(ACTIVE_LOAD, feed_id__in=ids, trade_date__range=(first, last)).values_list(
            "feed_id", "trade_date"
        )
    )
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    result = {}
    for feed_id in ids:
        strip = []
        for day in days:
            is_open, rows = calendar.get((feed_id, day)), bars.get((feed_id, day), 0)
            state = (
                "unknown"
                if is_open is None
                else "non_trading"
                if not is_open
                else "filled"
                if rows
                else "missing"
            )
            strip.append(StripDay(day, state, rows, (feed_id, day) in loading))
        result[feed_id] = strip
    return result


def recent(queryset: QuerySet, *order: OrderBy, per_feed: int = RECENT_PER_FEED) -> dict[int, list[Any]]:
    """The newest ``per_feed`` rows of each feed, in one query (ranked per feed)."""
    ranked = (
        queryset.annotate(rank=Window(RowNumber(), partition_by=[F("feed_id")], order_by=list(order)))
        .filter(rank__lte=per_feed)
        .order_by("feed_id", *order)
    )
    grouped: dict[int, list[Any]] = defaultdict(list)
    for row in ranked:
        grouped[row.feed_id].append(row)
    return grouped


# Load a range of days a feed lacks, logged on the feed with the range asked for.
GAP_FILL = Operation(
    "gap_fill",
    "Gap-fill",
    "gap-filled",
    lambda asked, actor, reason: services.gap_fill(*asked, actor=actor, via="admin", reason=reason),
    MarketFeed,
)


# Load chosen days again, bars or not, logged on the feed with the days queued.
RELOAD = Operation(
    "reload",
    "Reload days",
    "reloaded",
    lambda asked, actor, reason: services.reload(*asked, actor=actor, via="admin", reason=reason),
    MarketFeed,
)


class MarketActionInline(HistoryInline):
    """A feed's actions (gap-fills: who asked, through which door, the range and what was
    queued), the newest ``limit``; the whole list is the actions' own page."""

    model = MarketAction
    limit = ACTIONS_SHOWN

    def full_list_url(self, request: HttpRequest, parent: Model) -> str:
        if not self.admin_site.get_model_admin(MarketAction).has_view_permission(request):
            return ""
        return f"{reverse('admin:market_marketaction_changelist')}?feed__id__exact={parent.pk}"


@admin.register(MarketFeed)
class MarketFeedAdmin(TenantOwnedAdmin, admin.ModelAdmin):
    list_display = ["name", "exchange", "api_url", "token_display", "enabled", "sources", "created_at"]
    list_filter = ["enabled", "exchange"]
    list_select_related = ["tenant"]
    search_fields = ["name"]
    form = FeedForm
    inlines = [MarketActionInline]
    change_list_template = "admin/market/marketfeed/change_list.html"
    change_form_template = "admin/market/marketfeed/change_form.html"

    class Media:
        css = {"all": CSS}

    # -- who may do what --

    def get_queryset(self, request: HttpRequest) -> QuerySet[MarketFeed]:
        feeds = super().get_queryset(request).prefetch_related("freshness")
        return scope_queryset(feeds, request.user)

    def get_list_display(self, request: HttpRequest) -> list[str]:
        shown = list(self.list_display)
        return [shown[0], "tenant", *shown[1:]] if is_platform_operator(request) else shown

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """A gap-fill or a reload: staff granted ``market.operate_marketfeed``."""
        return GAP_FILL.permitted(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Disable a feed instead: deleting one deletes its bars, which the admin's
        confirmation page would list one by one."""
        return False

    # -- the list --

    @admin.display(description="token")
    def token_display(self, feed: MarketFeed) -> str:
        return masked(feed.token)

    @admin.display(description="freshness")
    def sources(self, feed: MarketFeed) -> SafeString:
        now = jobs.now()
        rows = {row.dataset: row for row in feed.freshness.all()}
        badges = []
        for dataset in Dataset:
            row = rows.get(dataset.value)
            status = (
                freshness.status(row.last_success, row.last_failure, now) if row else freshness.NEVER_INGESTED
            )
            badges.append(
                (dataset.value, status_badge(status, f"{dataset.value}: {status.replace('_', ' ')}"))
            )
        board = reverse("admin:market_marketfeed_board")
        return format_html(
            '<a href="{}#feed-{}" class="market-sources">{}</a>',
            board,
            feed.pk,
            format_html_join(" ", "{1}", badges),
        )

    # -- the board and the gap-fill --

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("board/", view(self.board_view), name="market_marketfeed_board"),
            path("<path:object_id>/gap-fill/", view(self.gap_fill_view), name="market_marketfeed_gap_fill"),
            path("<path:object_id>/reload/", view(self.reload_view), name="market_marketfeed_reload"),
            *super().get_urls(),
        ]

    def page_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "media": self.media,
        }

    def board_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = jobs.now()
        today = freshness.market_date(now)
        first = today - timedelta(days=STRIP_DAYS - 1)
        feeds = list(
            scope_queryset(MarketFeed.objects.select_related("tenant"), request.user).order_by(
                "tenant__name", "name", "pk"
            )
        )
        statuses = services.source_statuses(feeds, now)  # each feed's datasets, in order
        per_feed = len(Dataset.values)
        days = strips(feeds, first, today)
        batches = recent(DailyBatch.objects.filter(feed__in=feeds), F("market_date").desc())
        loads = recent(
            DayLoad.objects.filter(feed__in=feeds).select_related("requested_by"),
            F("created_at").desc(),
            F("id").desc(),
        )
        may_fill = self.has_operate_permission(request)
        boards = [
            FeedBoard(
                feed,
                statuses[n * per_feed : (n + 1) * per_feed],
                days[feed.pk],
                batches.get(feed.pk, []),
                loads.get(feed.pk, []),
                gap_fill_form(feed, today) if may_fill else None,
            )
            for n, feed in enumerate(feeds)
        ]
        context = {
            **self.page_context(request, "Market data freshness"),
            "boards": boards,
            "today": today,
            "first": first,
            "now": now,
            "legend": LEGEND,
            "strip_days": STRIP_DAYS,
            "is_operator": is_platform_operator(request),
        }
        return TemplateResponse(request, "admin/market/marketfeed/board.html", context)

    def gap_fill_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET with a range: the dry run. POST: the gap-fill itself, reported on the board;
        a range the service refuses comes back to the form with why, having written
        nothing."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        feed = self.get_object(request, unquote(object_id))
        if feed is None:
            raise Http404("No such feed visible to you.")
        today = freshness.market_date(jobs.now())
        preview = None
        if request.method == "POST":
            form = gap_fill_form(feed, today, request.POST)
            if form.is_valid():
                try:
                    start, end = form.cleaned_data["start"], form.cleaned_data["end"]
                    preview, loads = GAP_FILL.perform(
                        self,
                        request,
                        (feed, start, end),
                        request.POST.get("reason", ""),
                        logged=feed,
                        detail=f"{start} … {end}",
                    )
                except services.GapFillRefused as exc:
                    self.message_user(
                        request, f"Gap-fill of {feed} refused: {_sentence(str(exc))}", messages.ERROR
                    )
                else:
                    self.report(request, feed, preview, loads)
                    return redirect(f"{reverse('admin:market_marketfeed_board')}#feed-{feed.pk}")
        elif "start" in request.GET or "end" in request.GET:
            form = gap_fill_form(feed, today, request.GET)
            if form.is_valid():
                try:
                    preview = services.preview_gap_fill(
                        feed, form.cleaned_data["start"], form.cleaned_data["end"]
                    )
                except services.GapFillRefused as exc:
                    self.message_user(
                        request, f"Gap-fill of {feed} refused: {_sentence(str(exc))}", messages.ERROR
                    )
        else:
            form = gap_fill_form(feed, today)
        context = {
            **self.page_context(request, f"Gap-fill of {feed}"),
            "feed": feed,
            "original": feed,
            "form": form,
            "preview": preview,
            "today": today,
            "covered": sorted((preview.covered.items() if preview else []), reverse=True),
            "board_url": reverse("admin:market_marketfeed_board"),
        }
        return TemplateResponse(request, "admin/market/marketfeed/gap_fill.html", context)

    def reload_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET with a range: the preview, each day with what the calendar says of it, its
        bars and the load covering it, the days to fetch ticked. POST: the reload of the
        days ticked, reported on the board; refused (no reason, nothing to fetch …), the
        preview again with why, having written nothing."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        feed = self.get_object(request, unquote(object_id))
        if feed is None:
            raise Http404("No such feed visible to you.")
        today = freshness.market_date(jobs.now())
        form, preview, chosen = reload_form(feed, today), None, None
        if request.method == "POST":
            form = reload_form(feed, today, request.POST)
            if form.is_valid():
                chosen = form.cleaned_data["days"]
                try:
                    preview, loads = RELOAD.perform(
                        self,
                        request,
                        (feed, chosen),
                        request.POST.get("reason", ""),
                        logged=feed,
                        detail=lambda done: _days(load.trade_date for load in done[1]),
                    )
                except services.ReloadRefused as exc:
                    self.message_user(
                        request, f"Reload of {feed} refused: {_sentence(str(exc))}", messages.ERROR
                    )
                    preview = self.reload_preview(request, feed, form)
                else:
                    self.report_reload(request, feed, preview, loads)
                    return redirect(f"{reverse('admin:market_marketfeed_board')}#feed-{feed.pk}")
        elif "start" in request.GET or "end" in request.GET:
            form = reload_form(feed, today, request.GET)
            if form.is_valid():
                preview = self.reload_preview(request, feed, form)
        context = {
            **self.page_context(request, f"Reload days of {feed}"),
            "feed": feed,
            "original": feed,
            "form": form,
            "preview": preview,
            "ticked": set(preview.to_fetch if chosen is None else chosen) if preview else set(),
            "reason": request.POST.get("reason", "") if request.method == "POST" else "",
            "today": today,
            "board_url": reverse("admin:market_marketfeed_board"),
        }
        return TemplateResponse(request, "admin/market/marketfeed/reload.html", context)

    def reload_preview(
        self, request: HttpRequest, feed: MarketFeed, form: ReloadForm
    ) -> services.ReloadPreview | None:
        try:
            days = services.days_between(form.cleaned_data["start"], form.cleaned_data["end"])
            return services.preview_reload(feed, days)
        except services.ReloadRefused as exc:
            self.message_user(request, f"Reload of {feed} refused: {_sentence(str(exc))}", messages.ERROR)
            return None

    def report_reload(
        self, request: HttpRequest, feed: MarketFeed, preview: services.ReloadPreview, loads: list[DayLoad]
    ) -> None:
        queued = {load.trade_date for load in loads}
        covered = sorted((set(preview.to_fetch) - queued) | set(preview.covered), reverse=True)
        self.message_user(
            request,
            f"Reload of {feed}: queued {len(loads)} day(s): {_days(sorted(queued, reverse=True)) or 'none'}."
            + (f" Already being loaded: {_days(covered)}." if covered else ""),
            messages.SUCCESS if loads else messages.WARNING,
        )

    def report(
        self, request: HttpRequest, feed: MarketFeed, preview: services.Preview, loads: list[DayLoad]
    ) -> None:
        covered = (
            f" Already being loaded: {_days(sorted(preview.covered, reverse=True))}."
            if preview.covered
            else ""
        )
        if loads:
            self.message_user(
                request,
                f"Gap-fill of {feed}: queued {len(loads)} day(s): "
                f"{_days(load.trade_date for load in loads)}.{covered}",
                messages.SUCCESS,
            )
        else:
            self.message_user(
                request,
                f"Gap-fill of {feed}: nothing to queue, no open day of "
                f"{preview.start} … {preview.end} lacks bars without a "
                f"load.{covered}",
                messages.WARNING,
            )


# --- what the jobs and the services write -------------------------------------------------------


class FeedRowsAdmin(JobLinks, ReadOnlyAdmin):
    """Rows of a feed, shown to whoever may see the feed: scoped through its tenant."""

    class Media:
        css = {"all": CSS}

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return scope_queryset(super().get_queryset(request), request.user, "feed__tenant")


class StatusColumn:
    @admin.display(description="status", ordering="status")
    def status_display(self, row: Any) -> SafeString:
        return status_badge(row.status, row.get_status_display())


class BatchLoadInline(JobLinks, ReadOnlyInline):
    model = DayLoad
    show_change_link = True
    verbose_name_plural = "loads"
    fields = ["trade_date", "status", "trigger", "job", "rows", "error", "finished_at"]
    readonly_fields = fields
    ordering = ["-trade_date"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The batch's own record: whoever may see the batch sees its loads.
        return self.admin_site.get_model_admin(DailyBatch).has_view_permission(request, obj)

    job = job_cell("job_id")


@admin.register(DailyBatch)
class DailyBatchAdmin(StatusColumn, FeedRowsAdmin):
    list_display = [
        "market_date",
        "feed",
        "status_display",
        "gaps_display",
        "note",
        "due_at",
        "started_at",
        "finished_at",
    ]
    list_filter = ["status", ("feed", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["feed"]
    fields = [
        "feed",
        "market_date",
        "status_display",
        "due_at",
        "started_at",
        "finished_at",
        "gaps_display",
        "note",
    ]
    readonly_fields = fields
    inlines = [BatchLoadInline]

    @admin.display(description="gaps found")
    def gaps_display(self, batch: DailyBatch) -> str:
        return ", ".join(batch.gaps) if batch.gaps else "—"


@admin.register(DayLoad)
class DayLoadAdmin(StatusColumn, FeedRowsAdmin):
    list_display = [
        "trade_date",
        "feed",
        "status_display",
        "trigger",
        "requested_by",
        "job",
        "rows",
        "created_at",
        "finished_at",
        "error_line",
    ]
    list_display_links = ["trade_date"]
    list_filter = ["status", "trigger", ("feed", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["feed", "requested_by"]
    sortable_by = ["trade_date", "created_at"]
    fields = [
        "feed",
        "trade_date",
        "status_display",
        "trigger",
        "batch",
        "requested_by",
        "job",
        "rows",
        "error_display",
        "created_at",
        "finished_at",
    ]
    readonly_fields = fields

    job = job_cell("job_id")

    @admin.display(description="error")
    def error_line(self, load: DayLoad) -> str:
        return _first_line(load.error)

    @admin.display(description="error")
    def error_display(self, load: DayLoad) -> SafeString:
        return _pre(load.error)


@admin.register(SourceFreshness)
class SourceFreshnessAdmin(FeedRowsAdmin):
    list_display = [
        "feed",
        "dataset",
        "status_display",
        "last_success",
        "last_failure",
        "error_line",
        "rows_today_display",
    ]
    list_filter = ["dataset", ("feed", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["feed"]
    fields = [
        "feed",
        "dataset",
        "status_display",
        "last_success",
        "last_failure",
        "error_display",
        "rows_today_display",
        "rows_date",
    ]
    readonly_fields = fields

    @admin.display(description="status")
    def status_display(self, row: SourceFreshness) -> SafeString:
        status = freshness.status(row.last_success, row.last_failure, jobs.now())
        return status_badge(status)

    @admin.display(description="rows today")
    def rows_today_display(self, row: SourceFreshness) -> int:
        return freshness.rows_today(row, jobs.now())

    @admin.display(description="last error")
    def error_line(self, row: SourceFreshness) -> str:
        return _first_line(row.last_error)

    @admin.display(description="last error")
    def error_display(self, row: SourceFreshness) -> SafeString:
        return _pre(row.last_error)


@admin.register(MarketAction)
class MarketActionAdmin(FeedRowsAdmin):
    list_display = ["at", "feed", "kind", "actor", "via", "detail_line"]
    list_filter = ["kind", "via", ("feed", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["feed", "actor"]
    fields = ["at", "feed", "kind", "actor", "via", "message", "detail_display"]
    readonly_fields = fields

    @admin.display(description="detail")
    def detail_line(self, action: MarketAction) -> str:
        return _first_line(json.dumps(action.detail, ensure_ascii=False, sort_keys=True), 160)

    @admin.display(description="detail")
    def detail_display(self, action: MarketAction) -> SafeString:
        return _pre(json.dumps(action.detail, indent=2, ensure_ascii=False, sort_keys=True))


# What the market jobs work for, on the job pages and failure groups.
register_job_subject(subjects.LOAD_JOBS, subjects.load_subjects, permission="market.view_dayload")
register_job_subject(subjects.BATCH_JOBS, subjects.batch_subjects, permission="market.view_dailybatch")
register_job_subject(subjects.FEED_JOBS, subjects.feed_subjects, permission="market.view_marketfeed")
