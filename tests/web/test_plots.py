"""SVG rendering: well-formed markup, one group per series, escaping, palette, compaction."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from api.web.bar_chart import Bars, bar_chart
from api.web.heatmap_chart import heatmap
from api.web.line_chart import Series, compact, line_chart
from api.web.plots import DASHES, HATCHES, OKABE_ITO, RADIUS_AXIS_LABEL, Axis

SVG = "{http://www.w3.org/2000/svg}"


def _chart(series: list[Series]) -> ET.Element:
    markup = line_chart(
        series,
        chart_id="c1",
        title="Certified accuracy",
        x=Axis(RADIUS_AXIS_LABEL, 0.0, 1.0),
        y=Axis("certified accuracy", 0.0, 1.0, percent=True),
    )
    return ET.fromstring(str(markup))


def test_line_chart_has_one_group_per_series_with_palette_and_dashes() -> None:
    series = [Series(f"s{i}", [0, 0.5, 1], [1, 0.5 - i / 20, 0]) for i in range(3)]
    root = _chart(series)
    groups = root.findall(f".//{SVG}g[@class='series']")
    assert [g.get("data-label") for g in groups] == ["s0", "s1", "s2"]
    lines = [g.find(f"{SVG}polyline") for g in groups]
    assert [line.get("stroke") for line in lines] == list(OKABE_ITO[:3])
    assert [line.get("stroke-dasharray") for line in lines] == [None, DASHES[1], DASHES[2]]
    texts = "".join(root.itertext())
    assert RADIUS_AXIS_LABEL in texts and "certified accuracy" in texts
    assert "100%" in texts and "0%" in texts  # percent ticks on y


def test_series_data_round_trips_through_data_xy() -> None:
    root = _chart([Series("only", [0, 0.25, 0.5, 0.75, 1], [0.9, 0.9, 0.9, 0.4, 0.1])])
    data = json.loads(root.find(f".//{SVG}g[@class='series']").get("data-xy"))
    assert data == [[0, 0.9], [0.5, 0.9], [0.75, 0.4], [1, 0.1]]  # the flat run keeps its ends


def test_labels_are_escaped() -> None:
    root = _chart([Series('<b>"x" & y</b>', [0, 1], [0, 1])])
    group = root.find(f".//{SVG}g[@class='series']")
    assert group.get("data-label") == '<b>"x" & y</b>'  # parsed back, so it was escaped
    assert root.find(f".//{SVG}b") is None


def test_emphasis_draws_thicker() -> None:
    root = _chart([Series("a", [0, 1], [0, 1]), Series("b", [0, 1], [1, 0], emphasis=True)])
    widths = [p.get("stroke-width") for p in root.iter(f"{SVG}polyline")]
    assert widths == ["2", "3.5"]


def test_bad_series_raise() -> None:
    with pytest.raises(ValueError, match="at least one series"):
        _chart([])
    with pytest.raises(ValueError, match="2 x values but 3 y values"):
        _chart([Series("bad", [0, 1], [0, 1, 2])])


def test_compact_keeps_the_drawn_line() -> None:
    x = np.linspace(0, 1, 201)
    y = np.where(x < 0.3, 0.8, np.where(x < 0.6, 0.5, 0.0))
    cx, cy = compact(x, y)
    assert len(cx) < 10
    assert np.allclose(
        np.interp(x, cx, cy)[(x < 0.29) | ((x > 0.31) & (x < 0.59)) | (x > 0.61)],
        y[(x < 0.29) | ((x > 0.31) & (x < 0.59)) | (x > 0.61)],
    )


def test_heatmap_cells_values_and_missing() -> None:
    values = np.array([[0.1, 0.2, np.nan], [0.9, 0.5, 0.3]])
    root = ET.fromstring(
        str(
            heatmap(
                values,
                chart_id="h",
                title="ACR",
                row_labels=["0.5", "2"],
                col_labels=["1", "2", "3"],
                x_label="f_c",
                y_label="α",
                value_label="ACR",
            )
        )
    )
    cells = root.findall(f".//{SVG}g[@class='cell']")
    assert sorted(float(c.get("data-value")) for c in cells) == [0.1, 0.2, 0.3, 0.5, 0.9]
    missing = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "cell"]
    assert len(missing) == 1 and "no result" in "".join(missing[0].itertext())
    inks = {c.get("data-value"): c.find(f"{SVG}text").get("fill") for c in cells}
    assert inks["0.1000"] == "#fff" and inks["0.9000"] == "#000"  # readable on dark and light


def test_heatmap_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="does not match"):
        heatmap(
            np.zeros((2, 2)),
            chart_id="h",
            title="t",
            row_labels=["a"],
            col_labels=["1", "2"],
            x_label="x",
            y_label="y",
            value_label="v",
        )


def _bars(series: list[Bars], groups: list[str]) -> ET.Element:
    markup = bar_chart(
        groups,
        series,
        chart_id="b1",
        title="Base classifier accuracy",
        x_label="ε (units of 1/255)",
        y=Axis("accuracy", 0.0, 1.0, percent=True),
    )
    return ET.fromstring(str(markup))


def test_bar_chart_groups_bars_with_palette_hatching_and_values() -> None:
    groups = ["ε = 8/255", "ε = 16/255"]
    root = _bars(
        [Bars("clean", [0.9, 0.9]), Bars("ℓ∞", [0.4, 0.1]), Bars("ℓ∞ ∩ PD", [0.6, None])], groups
    )
    assert root.get("role") == "img" and root.find(f"{SVG}title").text == "Base classifier accuracy"
    series = root.findall(f".//{SVG}g[@class='series']")
    assert [g.get("data-label") for g in series] == ["clean", "ℓ∞", "ℓ∞ ∩ PD"]
    assert [g.get("data-colour") for g in series] == list(OKABE_ITO[:3])
    bars = [[r for r in g.iter(f"{SVG}rect") if r.get("class") == "bar-rect"] for g in series]
    assert [len(b) for b in bars] == [2, 2, 1]  # the missing value draws no bar
    assert [float(r.get("data-value")) for r in bars[1]] == [0.4, 0.1]
    # heights are proportional to the values (same baseline)
    heights = [float(r.get("height")) for r in bars[1]]
    assert heights[0] / heights[1] == pytest.approx(4.0, rel=0.02)
    assert bars[0][0].get("fill") == OKABE_ITO[0]  # the first series is solid
    patterns = {p.get("id"): p for p in root.iter(f"{SVG}pattern")}
    assert bars[1][0].get("fill") == "url(#b1-fill-1)" and "b1-fill-2" in patterns
    assert patterns["b1-fill-1"].find(f"{SVG}path").get("d") == HATCHES[1]
    assert patterns["b1-fill-1"].find(f"{SVG}rect").get("fill") == OKABE_ITO[1]
    texts = "".join(root.itertext())
    assert "40.0%" in texts and "ℓ∞, ε = 16/255: 10.0%" in texts
    assert "ℓ∞ ∩ PD, ε = 16/255: not measured" in texts
    assert "ε (units of 1/255)" in texts and "100%" in texts
    legend = root.find(f".//{SVG}g[@class='legend']")
    assert [r.get("fill") for r in legend.iter(f"{SVG}rect")] == [
        OKABE_ITO[0],
        "url(#b1-fill-1)",
        "url(#b1-fill-2)",
    ]


def test_bar_chart_rejects_ragged_series() -> None:
    with pytest.raises(ValueError, match="1 values for 2 groups"):
        _bars([Bars("bad", [0.5])], ["a", "b"])
    with pytest.raises(ValueError, match="at least one group"):
        _bars([], ["a"])
