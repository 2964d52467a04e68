"""The SVG charts: well-formed XML, accessible, values drawn to scale, text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from console.admin import charts

NS = {"svg": "http://www.w3.org/2000/svg"}


def bar_chart(*series: charts.Series, labels=("09:00", "09:05", "09:10"), **options) -> charts.Chart:
    return charts.Chart(
        title="Jobs finished",
        description="Per five minutes",
        labels=list(labels),
        series=list(series),
        x_label="interval start",
        y_label="jobs",
        **options,
    )


def parse(chart: charts.Chart, chart_id: str = "c1") -> ET.Element:
    return ET.fromstring(charts.render(chart, chart_id))


def values(svg: ET.Element, element: str) -> list[float]:
    return [float(node.get("data-value")) for node in svg.iterfind(f".//svg:{element}", NS)]


def test_it_renders_valid_svg_labelled_by_its_title_and_description():
    svg = parse(bar_chart(charts.Series("finished", [1, 2, 3])))

    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert svg.get("role") == "img"
    assert svg.get("aria-labelledby") == "c1-title c1-desc"
    assert svg.find("svg:title", NS).text == "Jobs finished"
    assert svg.find("svg:title", NS).get("id") == "c1-title"
    assert svg.find("svg:desc", NS).text == "Per five minutes"


def test_it_labels_both_axes_and_names_each_series_in_the_legend():
    svg = parse(bar_chart(charts.Series("finished", [1, 2, 3]), charts.Series("failed", [0, 1, 0])))

    texts = {node.get("class"): node.text for node in svg.iterfind(".//svg:text", NS)}
    assert texts["axis-label x-label"] == "interval start"
    assert texts["axis-label y-label"] == "jobs"
    legend = [node.text for node in svg.iterfind(".//svg:g[@class='legend']/svg:text", NS)]
    assert legend == ["finished", "failed"]


def test_bar_heights_are_proportional_to_the_values():
    svg = parse(bar_chart(charts.Series("finished", [2, 4, 8])))

    bars = svg.findall(".//svg:rect[@class='bar']", NS)
    heights = [float(bar.get("height")) for bar in bars]
    assert [float(bar.get("data-value")) for bar in bars] == [2, 4, 8]
    assert heights[1] == pytest.approx(2 * heights[0])
    assert heights[2] == pytest.approx(4 * heights[0])
    # Bars stand on the x axis: their bottoms line up.
    bottoms = {round(float(bar.get("y")) + float(bar.get("height")), 2) for bar in bars}
    assert len(bottoms) == 1


def test_the_y_axis_tops_out_at_a_round_number_above_the_peak():
    svg = parse(bar_chart(charts.Series("finished", [3, 7, 1])))

    ticks = [node.text for node in svg.iterfind(".//svg:g[@class='axis axis-y']/svg:text", NS)]
    assert ticks == ["0", "2", "4", "6", "8", "10"]
    bar = svg.findall(".//svg:rect[@class='bar']", NS)[1]
    assert float(bar.get("height")) == pytest.approx(0.7 * (charts.BOTTOM - charts.TOP))


@pytest.mark.parametrize(
    ("peak", "ceiling"), [(0, 1), (0.3, 0.5), (1, 1), (7, 10), (11, 20), (24, 25), (250, 250), (3001, 5000)]
)
def test_nice_ceiling(peak, ceiling):
    assert charts.nice_ceiling(peak) == pytest.approx(ceiling)


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (5, ["0", "1", "2", "3", "4", "5"]),
        (2, ["0", "0.5", "1", "1.5", "2"]),
        (25, ["0", "5", "10", "15", "20", "25"]),
        (0.4, ["0", "0.1", "0.2", "0.3", "0.4", "0.5"]),
        # Durations of a few milliseconds, in seconds: no two ticks read the same.
        (0.019, ["0", "0.005", "0.01", "0.015", "0.02"]),
        (0.0022, ["0", "0.0005", "0.001", "0.0015", "0.002", "0.0025"]),
    ],
)
def test_every_tick_is_a_round_number(peak, ticks):
    svg = parse(bar_chart(charts.Series("finished", [peak, 0, 0])))

    shown = [node.text for node in svg.iterfind(".//svg:g[@class='axis axis-y']/svg:text", NS)]
    assert shown == ticks


def test_line_points_are_proportional_and_a_missing_value_breaks_the_line():
    chart = bar_chart(
        charts.Series("p95", [10, 20, None, 40, 30]), kind="line", labels=["a", "b", "c", "d", "e"]
    )
    svg = parse(chart)

    assert values(svg, "circle") == [10, 20, 40, 30]
    cys = [float(point.get("cy")) for point in svg.iterfind(".//svg:circle", NS)]
    heights = [charts.BOTTOM - cy for cy in cys]
    assert heights[1] == pytest.approx(2 * heights[0])
    assert heights[2] == pytest.approx(4 * heights[0])
    lines = svg.findall(".//svg:polyline", NS)
    assert [len(line.get("points").split()) for line in lines] == [2, 2]


def test_an_empty_series_says_so_instead_of_drawing_nothing():
    for chart in (
        bar_chart(charts.Series("finished", [None, None, None])),
        bar_chart(labels=[]),
        bar_chart(charts.Series("p50", []), labels=[], kind="line"),
    ):
        svg = parse(chart)
        assert svg.findall(".//svg:rect[@class='bar']", NS) == []
        assert svg.findall(".//svg:circle", NS) == []
        empty = svg.find(".//svg:text[@class='chart-empty']", NS)
        assert empty is not None and empty.text == "No data in this window"


def test_all_zero_values_draw_flat_bars_on_a_unit_scale():
    svg = parse(bar_chart(charts.Series("finished", [0, 0, 0])))

    assert [float(bar.get("height")) for bar in svg.iterfind(".//svg:rect[@class='bar']", NS)] == [0, 0, 0]


def test_text_is_escaped():
    nasty = '<script>alert("x")</script> & co'
    chart = charts.Chart(
        title=nasty,
        description=nasty,
        labels=[nasty],
        x_label=nasty,
        y_label=nasty,
        series=[charts.Series(nasty, [1])],
    )
    markup = charts.render(chart, 'x"><script>')

    assert "<script>" not in markup
    svg = ET.fromstring(markup)  # still well-formed
    assert svg.get("id") == "xscript"
    assert svg.find("svg:title", NS).text == nasty
    assert svg.find(".//svg:g[@class='legend']/svg:text", NS).text == nasty
    assert svg.find(".//svg:g[@data-series]", NS).get("data-series") == nasty
    assert svg.find(".//svg:rect[@class='bar']/svg:title", NS).text.startswith(nasty)


def test_each_bar_carries_a_tooltip_with_its_value():
    svg = parse(bar_chart(charts.Series("finished", [1, 2.5, 3])))

    tips = [node.text for node in svg.iterfind(".//svg:rect[@class='bar']/svg:title", NS)]
    assert tips == ["09:00 — finished: 1", "09:05 — finished: 2.5", "09:10 — finished: 3"]


def test_x_labels_are_thinned_so_they_never_crowd():
    labels = [f"{hour:02d}:00" for hour in range(24)]
    svg = parse(bar_chart(charts.Series("finished", list(range(24))), labels=labels))

    shown = [node.text for node in svg.iterfind(".//svg:g[@class='axis axis-x']/svg:text", NS)]
    assert len(shown) <= charts.MAX_X_LABELS
    assert shown[0] == "00:00"


def test_a_series_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="has 2 values for 3 labels"):
        bar_chart(charts.Series("finished", [1, 2]))
