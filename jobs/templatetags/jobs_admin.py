"""Small renderers shared by the jobs admin's Python code and its templates."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from jobs.models import Job

register = template.Library()

# One colour per state, so a failed job stands out in a list of a hundred.
STATE_COLOURS: dict[str, str] = {
    Job.State.PENDING: "#417690",
    Job.State.RUNNING: "#b7791f",
    Job.State.SUCCEEDED: "#2f855a",
    Job.State.FAILED: "#c53030",
    Job.State.CANCELLED: "#718096",
}


@register.filter
def state_badge(state: str) -> SafeString:
    """A job state as a coloured badge; unknown or empty states render as plain text."""
    if not state:
        return format_html("{}", "—")
    colour = STATE_COLOURS.get(state, "#4a5568")
    return format_html(
        '<span class="job-state job-state-{}" style="display:inline-block;padding:1px 7px;'
        'border-radius:9px;color:#fff;background:{};font-size:11px;font-weight:600">{}</span>',
        state, colour, state,
    )


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
