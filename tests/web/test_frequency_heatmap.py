"""The Fourier heatmap SVG: one cell per frequency, DC in the centre, diverging colours around the
centre value, a legend, band circles, missing cells hatched, clear errors."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from matplotlib.colors import to_rgb

from api.web.frequency_heatmap import GRID_PIXELS, frequency_heatmap

SVG = "{http://www.w3.org/2000/svg}"
FREQS = [-16, -8, 0, 8]


def _svg(values, **kw) -> ET.Element:
    args = {"chart_id": "m", "title": "ACR map", "value_label": "ACR", "vmin": 0.0,
            "vmax": 1.0, "center": 0.5}  # fmt: skip
    return ET.fromstring(str(frequency_heatmap(values, FREQS, **(args | kw))))


def _cells(root: ET.Element) -> list[ET.Element]:
    group = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "cells")
    return list(group.iter(f"{SVG}rect"))


def _cell_at(root: ET.Element, i: int, j: int) -> ET.Element:
    return next(c for c in _cells(root) if c.find(f"{SVG}title").text.startswith(f"i {i}, j {j}:"))


def test_one_cell_per_frequency_with_its_value_and_the_dc_cell_in_the_centre() -> None:
    values = np.arange(16, dtype=float).reshape(4, 4) / 15
    root = _svg(values)
    cells = _cells(root)
    assert len(cells) == 16
    dc = _cell_at(root, 0, 0)
    assert dc.find(f"{SVG}title").text == f"i 0, j 0: {values[2, 2]:.3f}"
    cell = GRID_PIXELS / 4
    left = min(float(c.get("x")) for c in cells)
    top = min(float(c.get("y")) for c in cells)
    # rows go up with i, columns right with j: DC is the cell just right of and above centre
    assert float(dc.get("x")) == pytest.approx(left + 2 * cell)
    assert float(dc.get("y")) == pytest.approx(top + 1 * cell)
    highest_i = _cell_at(root, 8, -16)
    assert float(highest_i.get("y")) == pytest.approx(top)
    circles = [c for c in root.iter(f"{SVG}circle") if c.get("stroke-dasharray")]
    assert len(circles) == 2  # band edges 16/3 and 32/3 cycles/image, centred on DC
    assert {float(c.get("cx")) for c in circles} == {float(dc.get("x")) + cell / 2}
    assert float(circles[0].get("r")) == pytest.approx(16 / 3 / 8 * cell, abs=0.01)


def test_colours_diverge_around_the_centre_value() -> None:
    values = np.full((4, 4), 0.5)
    values[0, 0], values[3, 3] = 0.0, 1.0
    root = _svg(values)
    low = to_rgb(_cell_at(root, -16, -16).get("fill"))
    high = to_rgb(_cell_at(root, 8, 8).get("fill"))
    middle = to_rgb(_cell_at(root, 0, 0).get("fill"))
    assert low[0] > low[2] and high[2] > high[0]  # red below the centre, blue above
    assert min(middle) > 0.9  # near white at the centre


def test_legend_missing_cells_and_labels() -> None:
    values = [[None, 0.2, 0.3, 0.4]] + [[0.1] * 4] * 3
    root = _svg(values, percent=True, value_label="accuracy")
    missing = [c for c in _cells(root) if c.get("class") == "missing"]
    assert len(missing) == 1 and "not computed" in missing[0].find(f"{SVG}title").text
    legend = next(g for g in root.iter(f"{SVG}g") if "colour-bar" in g.get("class", ""))
    texts = [t.text for t in legend.iter(f"{SVG}text")]
    assert texts == ["100%", "50%", "0%", "accuracy"]
    labels = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "horizontal frequency j (cycles/image)" in labels
    assert "vertical frequency i (cycles/image)" in labels
    assert root.find(f"{SVG}title").text == "ACR map"
    quiet = _svg(values, tooltips=False)
    assert [c.find(f"{SVG}title") is None for c in _cells(quiet)].count(False) == 1  # missing


def test_a_difference_map_is_centred_at_zero() -> None:
    diff = np.zeros((4, 4))
    diff[1, 1] = -0.2
    root = _svg(diff, vmin=-0.2, vmax=0.2, center=0.0)
    worse = to_rgb(_cell_at(root, -8, -8).get("fill"))
    same = to_rgb(_cell_at(root, 0, 0).get("fill"))
    assert worse[0] > 2 * worse[2] and sum(worse) < 1.0  # the most negative cell: dark red
    assert min(same) > 0.9  # no difference: near white


def test_bad_shapes_and_scales_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="do not match 4 frequencies"):
        _svg(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="strictly between"):
        _svg(np.zeros((4, 4)), center=1.0)
