"""One inline for every history table (``jobs.History``: a job's events, an export job's,
an ingest run's actions, a market feed's, a handoff's transitions): the same columns in
the same words on every page, the newest rows when a history is long, and rows that never
widen the page (cards on a phone; elsewhere a table that scrolls in its own box)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import Model, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import dateformat, timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from console.admin.readonly import ReadOnlyInline

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups
    from django.forms.models import BaseInlineFormSet as _FormSet

# The vocabulary's columns; a subclass's own (``extra_columns``) go between the move and
# who made it.
LEADING = ("when", "what", "change")
TRAILING = ("by", "via", "message_shown", "detail_shown")
DETAIL_CHARS = 300
# A message longer than its first line (a failed attempt's traceback) shows that line and
# folds the whole, up to this many characters, under it.
FOLDED_CHARS = 4000


class HistoryFormSet(BaseInlineFormSet):
    """The parent's history: its newest ``inline.limit`` rows, oldest first, and the lines
    above the table (how many earlier rows it leaves out, and the inline's own notes).

    A history takes no input: whatever is posted with its parent's form (an editable
    parent's save) is not read, so the rows are always the database's, and nothing is
    validated or saved."""

    inline: ClassVar[HistoryInline]
    request: ClassVar[HttpRequest]

    def __init__(self, data: Any = None, files: Any = None, **kwargs: Any) -> None:
        super().__init__(None, None, **kwargs)

    def is_valid(self) -> bool:
        return True

    def save(self, commit: bool = True) -> list[Any]:
        self.new_objects, self.changed_objects, self.deleted_objects = [], [], []
        return []

    def get_queryset(self) -> QuerySet[Any]:
        if not hasattr(self, "_queryset"):
            rows = super().get_queryset()
            self._whole = rows
            if self.inline.limit is not None:
                # The newest, by the inline's ordering reversed; shown in that ordering.
                rows = rows.filter(pk__in=rows.reverse().values("pk")[: self.inline.limit])
            self._queryset = rows
        return self._queryset

    @cached_property
    def hidden(self) -> int:
        """How many earlier rows the table leaves out (counted only when it is full)."""
        shown = len(self.get_queryset())
        if self.inline.limit is None or shown < self.inline.limit:
            return 0
        return self._whole.count() - shown

    @cached_property
    def has_detail(self) -> bool:
        """Whether a shown row has a detail: without one, the column is left out."""
        return any(row.detail for row in self.get_queryset())

    @cached_property
    def column_count(self) -> int:
        return len(self.inline.columns())

    @cached_property
    def notes(self) -> list[str | SafeString]:
        return self.inline.notes(self.request, self.instance, self.hidden)


class HistoryInline(ReadOnlyInline):
    """A ``jobs.History`` table under its parent's page: when, what, the move from one
    status to the next, the subclass's ``extra_columns``, by whom, through which door,
    the message and the detail (compact; an empty one shows nothing).

    A subclass sets ``model`` (and ``fk_name`` if it has two keys to the parent). A long
    history shows its newest ``limit`` rows and says how many it leaves out, linking to
    ``full_list_url`` where there is a whole list. Whoever may see the parent sees its
    history; an add page shows none. ``render`` draws it inside another page (a snapshot's
    export jobs, an ingest run's live timeline, a delivery's job).
    """

    template = "admin/console/history.html"
    formset = HistoryFormSet
    verbose_name_plural = "history"
    ordering = ["at", "id"]
    # A cell with nothing to say: a dash, which a phone's card leaves out (history.css).
    empty_value_display = '<span class="history-empty">—</span>'
    limit: int | None = 200
    extra_columns: tuple[str, ...] = ()
    message_chars = 500

    # -- what is shown --

    def columns(self) -> list[str]:
        return [*LEADING, *self.extra_columns, *TRAILING]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> _FieldGroups:
        return [*self.columns()]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.columns()

    def rows(self, request: HttpRequest) -> QuerySet[Any]:
        """Every parent's history rows, in order, with their actors; a subclass narrows
        them (a job's, without its progress steps)."""
        rows = self.model._default_manager.select_related("actor")
        return rows.order_by(*self.get_ordering(request))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        if not self.has_view_or_change_permission(request):
            return self.model._default_manager.none()
        return self.rows(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(self.admin_site.get_model_admin(self.parent_model).has_view_permission(request, obj))

    def get_formset(
        self, request: HttpRequest, obj: Any = None, **kwargs: Any
    ) -> type[_FormSet[Any, Any, Any]]:
        formset = super().get_formset(request, obj, **kwargs)
        return type(formset.__name__, (formset,), {"inline": self, "request": request})

    def notes(self, request: HttpRequest, parent: Model, hidden: int) -> list[str | SafeString]:
        """The lines above the table. A subclass adds its own (a job's folded progress)."""
        if not hidden:
            return []
        said = f"{hidden:,} earlier entr{'y' if hidden == 1 else 'ies'} not shown."
        url = self.full_list_url(request, parent)
        return [format_html('{} <a href="{}">The whole history</a>', said, url) if url else said]

    def full_list_url(self, request: HttpRequest, parent: Model) -> str:
        """Where the whole history is listed, for whom may see it; empty: nowhere."""
        return ""

    def status_html(self, status: str) -> str | SafeString:
        """A status of the move; a subclass draws its own (the engine's state badges)."""
        return status or "—"

    # -- the columns --

    @admin.display(description="at")
    def when(self, row: Any) -> SafeString:
        shown = dateformat.format(timezone.localtime(row.at), "Y-m-d H:i:s")
        return format_html('<time datetime="{}">{}</time>', row.at.isoformat(), shown)

    @admin.display(description="what")
    def what(self, row: Any) -> str:
        return str(dict(row._meta.get_field("kind").flatchoices).get(row.kind, row.kind))

    @admin.display(description="from → to")
    def change(self, row: Any) -> str | SafeString:
        if not (row.from_status or row.to_status):
            return self.get_empty_value_display()
        return format_html("{} → {}", self.status_html(row.from_status), self.status_html(row.to_status))

    @admin.display(description="by")
    def by(self, row: Any) -> str | SafeString:
        return row.actor.get_username() if row.actor_id else self.get_empty_value_display()

    @admin.display(description="message")
    def message_shown(self, row: Any) -> str | SafeString:
        """The message's first line; when there is more (an error's traceback), the whole
        folded under it, so that a row reads as one line, not as frames run together."""
        text = (row.message or "").strip()
        if not text:
            return ""
        head, _, rest = text.partition("\n")
        shown = format_html(
            '<span class="history-message">{}</span>', Truncator(head).chars(self.message_chars)
        )
        if not rest.strip():
            return shown
        return format_html(
            '{}<details class="history-folded"><summary>the whole message</summary><pre>{}</pre></details>',
            shown,
            Truncator(text).chars(FOLDED_CHARS),
        )

    @admin.display(description="detail")
    def detail_shown(self, row: Any) -> str | SafeString:
        """``key: value, …`` on one line (a value that is not text as JSON), cut to
        ``DETAIL_CHARS`` with the whole in its title."""
        if not row.detail:
            return ""
        whole = json.dumps(row.detail, ensure_ascii=False, sort_keys=True)
        if isinstance(row.detail, dict):
            line = ", ".join(
                f"{key}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
                for key, value in sorted(row.detail.items())
            )
        else:
            line = whole
        if len(line) <= DETAIL_CHARS:
            return format_html('<code class="history-detail">{}</code>', line)
        return format_html(
            '<code class="history-detail" title="{}">{}</code>', whole, Truncator(line).chars(DETAIL_CHARS)
        )

    # -- inside another page --

    def render(self, request: HttpRequest, parent: Model, *, heading: bool = False) -> SafeString:
        """This history of ``parent`` drawn inside another page than the parent's own,
        which has already checked that the user may see ``parent``: under a heading of its
        own with ``heading``, else bare (below the page's own heading or summary)."""
        formset_class = self.get_formset(request, parent)
        formset = formset_class(
            instance=parent,
            prefix=f"{formset_class.get_default_prefix()}-{parent.pk}",
            queryset=self.rows(request),
        )
        wrapped = helpers.InlineAdminFormSet(
            self,
            formset,
            list(self.get_fieldsets(request, parent)),
            {},
            self.get_readonly_fields(request, parent),
            model_admin=None,  # kept, never read: the inline is the rows' admin
            has_add_permission=False,
            has_change_permission=False,
            has_delete_permission=False,
            has_view_permission=True,
        )
        return render_to_string(
            self.template, {"inline_admin_formset": wrapped, "nested": not heading}, request=request
        )
