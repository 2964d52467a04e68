"""Small charts rendered as SVG on the server: the dashboard needs no JS library or CDN.

A chart is a value (``Chart``: categories on the x axis, one or more ``Series`` of
numbers); ``render`` turns it into one self-contained ``<svg>`` element. Every piece of
text is XML-escaped here, so callers may mark the result safe. Accessibility: the SVG
has ``role="img"`` labelled by its ``<title>`` and ``<desc>``, both axes carry a label,
each bar or point has a ``<title>`` naming its value (a hover tooltip without JS), and a
legend names each series. Missing values (``None``) draw nothing; a chart without any
value says so instead of drawing an empty grid.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Literal

WIDTH, HEIGHT = 480, 250
# The plot area inside the frame: room on the left for tick values, below for the x
# labels, the x-axis label and the legend.
LEFT, RIGHT, TOP, BOTTOM = 58, WIDTH - 12, 14, HEIGHT - 72
MAX_X_LABELS = 8
PALETTE = ("#417690", "#c53030", "#b7791f", "#2f855a", "#6b46c1", "#2b6cb0")


def plain_number(value: float) -> str:
    """``3`` rather than ``3.0``; two decimals, or as many as three significant digits
    need below 0.01, so that a scale of milliseconds in seconds reads 0.004, 0.008, …
    rather than 0, 0.01, 0.01."""
    if float(value).is_integer():
        return str(int(value))
    decimals = max(2, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    colour: str | None = None


@dataclass(frozen=True)
class Chart:
    """What to draw. ``labels`` name the x categories (one per value of each series)."""

    title: str
    description: str
    labels: Sequence[str]
    series: Sequence[Series]
    x_label: str
    y_label: str
    kind: Literal["bar", "line"] = "bar"
    value_format: Callable[[float], str] = field(default=plain_number)

    def __post_init__(self) -> None:
        for series in self.series:
            if len(series.values) != len(self.labels):
                raise ValueError(
                    f"series {series.name!r} has {len(series.values)} values for {len(self.labels)} labels"
                )

    @property
    def has_data(self) -> bool:
        return any(value is not None for series in self.series for value in series.values)

    @property
    def peak(self) -> float:
        return max(
            (value for series in self.series for value in series.values if value is not None), default=0.0
        )


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k that is ≥ ``value``: a y axis whose ticks read
    as round numbers. Zero or less gives 1, so an all-zero chart still has a scale."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude  # unreachable: 10 × magnitude > value by construction


def tick_count(top: float) -> int:
    """How many steps to cut the axis into so that every tick is a round number:
    5 → 0, 1, …, 5; 2 → 0, 0.5, …, 2; 10 → 0, 2, …, 10."""
    mantissa = top / 10 ** math.floor(math.log10(top))
    return 4 if math.isclose(mantissa, 2) else 5


@dataclass(frozen=True)
class Scale:
    """Maps values to the plot area: y from 0 at the bottom up to ``top`` (a nice number),
    x as equal slots, one per label."""

    top: float
    slots: int

    @property
    def slot_width(self) -> float:
        return (RIGHT - LEFT) / max(self.slots, 1)

    def y(self, value: float) -> float:
        return BOTTOM - self.height(value)

    def height(self, value: float) -> float:
        return max(value, 0.0) / self.top * (BOTTOM - TOP)

    def x_centre(self, index: int) -> float:
        return LEFT + (index + 0.5) * self.slot_width


def render(chart: Chart, chart_id: str) -> str:
    """The chart as one ``<svg>`` element; ``chart_id`` makes its element ids unique on
    the page (characters other than letters, digits, ``-`` and ``_`` are dropped)."""
    ident = re.sub(r"[^A-Za-z0-9_-]", "", chart_id) or "chart"
    scale = Scale(top=nice_ceiling(chart.peak), slots=len(chart.labels))
    if not chart.has_data:
        body = [
            _text(WIDTH / 2, (TOP + BOTTOM) / 2, "No data in this window", css="chart-empty", anchor="middle")
        ]
    elif chart.kind == "line":
        body = _lines(chart, scale)
    else:
        body = _bars(chart, scale)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-{chart.kind}" '
        f'id="{ident}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-labelledby="{ident}-title {ident}-desc" '
        f'font-family="sans-serif" font-size="11">',
        f'<title id="{ident}-title">{escape(chart.title)}</title>',
        f'<desc id="{ident}-desc">{escape(chart.description)}</desc>',
        *_axes(chart, scale),
        *body,
        *_legend(chart),
        "</svg>",
    ]
    return "".join(parts)


def _colour(chart: Chart, index: int) -> str:
    return chart.series[index].colour or PALETTE[index % len(PALETTE)]


def _text(x: float, y: float, content: str, *, css: str, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text class="{css}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(content)}</text>'
    )


def _axes(chart: Chart, scale: Scale) -> list[str]:
    """Gridlines with tick values, the x category labels (thinned so they never overlap)
    and both axis labels."""
    parts = ['<g class="axis axis-y" stroke="#ccc">']
    ticks = tick_count(scale.top)
    for tick in range(ticks + 1):
        value = scale.top * tick / ticks
        y = scale.y(value)
        parts.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            _text(
                LEFT - 6,
                y + 4,
                chart.value_format(value),
                css="tick",
                anchor="end",
                extra=' stroke="none" fill="#444"',
            )
        )
    parts.append("</g>")
    every = max(1, math.ceil(len(chart.labels) / MAX_X_LABELS))
    parts.append('<g class="axis axis-x" fill="#444">')
    parts.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="#666"/>')
    for index, label in enumerate(chart.labels):
        if index % every == 0:
            parts.append(_text(scale.x_centre(index), BOTTOM + 14, label, css="tick", anchor="middle"))
    parts.append("</g>")
    parts.append(
        _text((LEFT + RIGHT) / 2, BOTTOM + 32, chart.x_label, css="axis-label x-label", anchor="middle")
    )
    middle = (TOP + BOTTOM) / 2
    parts.append(
        _text(
            14,
            middle,
            chart.y_label,
            css="axis-label y-label",
            anchor="middle",
            extra=f' transform="rotate(-90 14 {middle:.1f})"',
        )
    )
    return parts


def _bars(chart: Chart, scale: Scale) -> list[str]:
    """Grouped bars: in each slot one bar per series, side by side."""
    group = scale.slot_width * 0.8
    width = group / max(len(chart.series), 1)
    parts = []
    for number, series in enumerate(chart.series):
        parts.append(
            f'<g class="series series-{number}" fill="{_colour(chart, number)}" '
            f'data-series="{escape(series.name)}">'
        )
        for index, value in enumerate(series.values):
            if value is None:
                continue
            x = LEFT + index * scale.slot_width + (scale.slot_width - group) / 2 + number * width
            parts.append(
                f'<rect class="bar" x="{x:.2f}" y="{scale.y(value):.2f}" width="{width:.2f}" '
                f'height="{scale.height(value):.2f}" data-value="{value:g}">'
                f"<title>{escape(_point_title(chart, series, index, value))}</title></rect>"
            )
        parts.append("</g>")
    return parts


def _lines(chart: Chart, scale: Scale) -> list[str]:
    """One polyline per run of consecutive values (a missing value breaks the line), and
    a marker with its tooltip on every point."""
    parts = []
    for number, series in enumerate(chart.series):
        colour = _colour(chart, number)
        parts.append(f'<g class="series series-{number}" data-series="{escape(series.name)}">')
        for run in _runs(series.values):
            points = " ".join(f"{scale.x_centre(i):.2f},{scale.y(v):.2f}" for i, v in run)
            parts.append(
                f'<polyline class="line" fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
            )
        for index, value in enumerate(series.values):
            if value is not None:
                parts.append(
                    f'<circle class="point" cx="{scale.x_centre(index):.2f}" '
                    f'cy="{scale.y(value):.2f}" r="3" fill="{colour}" data-value="{value:g}">'
                    f"<title>{escape(_point_title(chart, series, index, value))}</title></circle>"
                )
        parts.append("</g>")
    return parts


def _runs(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    runs: list[list[tuple[int, float]]] = [[]]
    for index, value in enumerate(values):
        if value is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((index, value))
    return [run for run in runs if run]


def _point_title(chart: Chart, series: Series, index: int, value: float) -> str:
    return f"{chart.labels[index]} — {series.name}: {chart.value_format(value)}"


def _legend(chart: Chart) -> list[str]:
    parts = ['<g class="legend">']
    x, y = LEFT, HEIGHT - 14
    for number, series in enumerate(chart.series):
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{_colour(chart, number)}"/>')
        parts.append(_text(x + 14, y, series.name, css="legend-label"))
        x += 24 + 7 * len(series.name)
    parts.append("</g>")
    return parts
