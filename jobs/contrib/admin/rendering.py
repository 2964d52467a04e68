"""Small renderers shared by the jobs admin's Python code and its templates (the
templates load them as the ``jobs_admin`` library, ``jobs/templatetags/jobs_admin.py``)."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

# The badges' colours are in jobs/static/jobs/states.css (pages showing badges load it).
STATES_CSS = "jobs/states.css"


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
