"""Small renderers shared by the market admin's Python code and its templates (which
load them as the ``market_admin`` library, ``market/templatetags/market_admin.py``).

Colours are in ``market/static/market/market.css``: the Content-Security-Policy allows
no style attributes.
"""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def status_badge(status: str, label: str = "") -> SafeString:
    """A source's freshness, or a batch's or a load's status, as a coloured badge."""
    if not status:
        return format_html("{}", "—")
    return format_html(
        '<span class="market-status market-status-{}">{}</span>', status, label or status.replace("_", " ")
    )
