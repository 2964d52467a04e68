"""Small renderers shared by the jobs admin's Python code and its templates (the
templates load them as the ``jobs_admin`` library, ``console/templatetags/jobs_admin.py``)."""

from __future__ import annotations

from typing import Any

from django import template
from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from jobs.why import error_line

register = template.Library()

# The badges' colours are in console/static/console/states.css (pages showing badges load it).
STATES_CSS = "console/states.css"


@register.filter
def state_badge(state: str) -> SafeString:
    """A job state as a coloured badge (colours: ``STATES_CSS``); empty renders as a dash."""
    if not state:
        return format_html("{}", "—")
    return format_html('<span class="job-state job-state-{}">{}</span>', state, state)


def format_duration(seconds: float | None) -> str:
    """Seconds as '850 ms', '42.1 s', '3 min 20 s' or '2 h 05 min'."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


# A bulk action is a loop of transactions, one per row; beyond this, narrow the list first.
MAX_BULK = 1000


def error_cut(head: str) -> str | SafeString:
    """A list's last-error column: the line that says what went wrong, cut to the column
    (the whole line on hover, states.css)."""
    line = error_line(head)
    if not line:
        return "—"
    return format_html('<span class="job-cut job-error-line" title="{}">{}</span>', line, line)


def error_block(error: str) -> str | SafeString:
    """A detail page's last error, whole and preformatted (a traceback keeps its lines)."""
    return format_html('<pre class="job-error">{}</pre>', error) if error else "—"


def bulk_selection(
    model_admin: Any, request: HttpRequest, queryset: QuerySet, op: Any, noun: str
) -> tuple[list[Any], list[Any]] | None:
    """A bulk action's selection in id order, split into what ``op`` allows and what it
    skips; None, with a message saying to narrow the list, past ``MAX_BULK`` rows."""
    selected = list(queryset.order_by("id")[: MAX_BULK + 1])
    if len(selected) > MAX_BULK:
        model_admin.message_user(
            request,
            f"{op.label} acts on at most {MAX_BULK} {noun} at once; narrow the list with filters first.",
            messages.WARNING,
        )
        return None
    return ([row for row in selected if op.allows(row)], [row for row in selected if not op.allows(row)])


def action_preview(
    model_admin: Any,
    request: HttpRequest,
    template_name: str,
    *,
    title: str,
    operation: Any,
    action: str,
    touch: list[Any],
    skip: list[Any],
) -> TemplateResponse:
    """A bulk action's preview page (what it will touch, what it skips, a reason), for the
    job and the delivery lists alike."""
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": model_admin.model._meta,
        "operation": operation,
        "action": action,
        "touch": touch,
        "skip": skip,
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, template_name, context)
