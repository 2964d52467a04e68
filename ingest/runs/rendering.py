"""Small renderers shared by the ingest admin's Python code and its templates (which load
them as the ``ingest_admin`` library, ``ingest/templatetags/ingest_admin.py``).

Colours are in ``ingest/static/ingest/runs.css``: the Content-Security-Policy allows no
style attributes.
"""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

import jobs

register = template.Library()


@register.filter
def status_badge(status: str, label: str = "") -> SafeString:
    """A run's, batch's, hook execution's or breaker's status as a coloured badge."""
    if not status:
        return format_html("{}", "—")
    return format_html(
        '<span class="ingest-status ingest-status-{}">{}</span>', status, label or status.replace("_", " ")
    )


def wait_text(seconds: float) -> str:
    """Seconds ahead as 'in 42 s', 'in 3 min 05 s' or 'in 2 h 05 min'; 'due' once passed."""
    if seconds <= 0:
        return "due"
    whole = int(seconds + 0.999)
    if whole < 60:
        return f"in {whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"in {minutes} min {secs:02d} s"
    return f"in {minutes // 60} h {minutes % 60:02d} min"


@register.filter
def countdown(when: datetime | None) -> SafeString:
    """A moment ahead, counted down in the browser (``ingest/run_live.js``) from the
    engine's clock's reading now."""
    if when is None:
        return format_html("{}", "—")
    seconds = (when - jobs.now()).total_seconds()
    return format_html(
        '<time class="ingest-countdown" datetime="{}" title="{}">{}</time>',
        when.isoformat(),
        when.strftime("%Y-%m-%d %H:%M:%S %Z"),
        wait_text(seconds),
    )
