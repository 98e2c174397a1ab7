"""The figure specs (``certbench.figures``): valid Vega-Lite (checked against the schema Altair
ships), the data each figure draws, its palette, bands, hover read-outs and legends, the
Fourier maps' conventions, the CLI's files from the same specs, and clear errors."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

import jsonschema
import numpy as np
import pytest

from certbench.figures import (
    OKABE_ITO,
    Axis,
    Bars,
    Curve,
    FitLine,
    ScatterPoint,
    bar_chart,
    compact,
    frequency_heatmap,
    grid_heatmap,
    line_chart,
    probit_axis,
    render,
    scatter_chart,
)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads(
        files("altair").joinpath("vegalite/v6/schema/vega-lite-schema.json").read_text()
    )
    return jsonschema.Draft7Validator(schema)


def valid(spec: dict[str, Any]) -> dict[str, Any]:
    errors = sorted(_validator().iter_errors(spec), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message[:200]}" for e in errors[:5]]
    return spec


def _curves() -> list[Curve]:
    x = np.linspace(0, 1, 201)
    return [
        Curve("Bravo (#7)", x, 1 - x, emphasis=True, band=(0.9 - x, 1.1 - x, "95 % band")),
        Curve("Alpha & <b> (#6)", x, (1 - x) ** 2),
        Curve("mean over 2 sets", x, np.full_like(x, 0.5), markers=True),
    ]


def test_a_line_chart_draws_every_curve_with_its_band_palette_and_read_out() -> None:
    spec = valid(line_chart(_curves(), title="t", x=Axis("radius", 0, 1),
                            y=Axis("acc", 0, 1, percent=True)))  # fmt: skip
    rows = spec["data"]["values"]
    labels = list(dict.fromkeys(r["series"] for r in rows))
    assert labels == ["Bravo (#7)", "Alpha & <b> (#6)", "mean over 2 sets"]  # text, unescaped
    line = spec["layer"][0]
    assert line["encoding"]["color"]["scale"]["range"] == list(OKABE_ITO[:3])
    assert line["encoding"]["strokeDash"]["scale"]["range"][1] == [7, 3]
    assert {r["w"] for r in rows if r["series"] == "Bravo (#7)"} == {3.5}  # emphasis: thicker
    band = [r for r in rows if "lo" in r]
    assert band and {r["series"] for r in band} == {"Bravo (#7)"}
    assert all(r["lo"] <= r["y"] <= r["hi"] for r in band)
    hover = spec["layer"][-1]
    assert hover["params"][0]["select"]["nearest"] is True
    assert [t["title"] for t in hover["encoding"]["tooltip"]][:3] == ["curve", "radius", "acc"]
    flat = [r for r in rows if r["series"] == "mean over 2 sets"]
    assert len(flat) == 2 and all(r.get("marker") for r in flat)  # a flat curve: its two ends


def test_compact_keeps_the_drawn_line() -> None:
    x = np.arange(10.0)
    y = np.array([1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.2, 0.2, 0.2])
    kx, ky = compact(x, y)
    assert np.allclose(np.interp(x, kx, ky), np.where(np.isin(x, kx), y, np.interp(x, kx, ky)))
    assert list(kx) == [0, 2, 3, 6, 7, 9]


def test_bad_curves_are_refused() -> None:
    with pytest.raises(ValueError, match="needs at least one curve"):
        line_chart([], title="t", x=Axis("x", 0, 1), y=Axis("y", 0, 1))
    with pytest.raises(ValueError, match="3 x values but 2 y values"):
        line_chart([Curve("a", [0, 1, 2], [0, 1])], title="t", x=Axis("x", 0, 1),
                   y=Axis("y", 0, 1))  # fmt: skip
    with pytest.raises(ValueError, match="repeat"):
        line_chart([Curve("a", [0], [0]), Curve("a", [0], [1])], title="t",
                   x=Axis("x", 0, 1), y=Axis("y", 0, 1))  # fmt: skip


def test_long_titles_wrap_at_words() -> None:
    title = "Sun, Mao, Müller & Vechev: fraction of images correct with a p_A above x (certbench)"
    spec = line_chart(_curves(), title=title, x=Axis("x", 0, 1), y=Axis("y", 0, 1))
    lines = spec["title"]["text"]
    assert isinstance(lines, list) and " ".join(lines) == title  # every word kept, none cut


def test_legends_show_every_name_in_full() -> None:
    """Issue 34 §4: legends cut long names at 240 px ("LeNet-5, Gaussian nois…"), so entries
    whose names differ at the end read alike. Every label is drawn whole, wrapped at spaces
    into lines that fit the plot's width, in a line chart and in a bar chart."""
    import re
    from html import unescape

    stem = "LeNet-5, Gaussian augmentation with consistency regularisation and noise"
    names = [f"{stem} σ = 0.25 (#12)", f"{stem} σ = 0.50 (#13)", "short (#2)"]
    x = np.linspace(0, 1, 5)
    curves = [Curve(name, x, 1 - x / (k + 1)) for k, name in enumerate(names)]
    bars = [Bars(name, [0.5 + 0.1 * k]) for k, name in enumerate(names)]
    for spec in (
        valid(line_chart(curves, title="t", x=Axis("r", 0, 1), y=Axis("acc", 0, 1))),
        valid(bar_chart(["clean"], bars, title="t", x_label="set", y=Axis("acc", 0, 1))),
    ):
        svg = render(spec, "svg").decode()
        assert "…" not in svg
        legend = svg[svg.index('class="mark-group role-legend"') :]
        texts = re.findall(r"<text[^>]*>(.*?)</text>", legend, re.S)
        drawn = [" ".join(unescape(t) for t in re.findall(r"<tspan[^>]*>(.*?)</tspan>", x))
                 or unescape(x) for x in texts]  # fmt: skip
        assert [d for d in drawn if d in names] == names, drawn


def test_bar_chart_values_missing_bars_and_intervals() -> None:
    spec = valid(bar_chart(
        ["ε = 8/255", "ε = 16/255"],
        [Bars("clean", [0.9, 0.9]), Bars("ℓ∞", [0.4, None]),
         Bars("ℓ∞ ∩ PD", [0.5, 0.2], low=[0.4, 0.1], high=[0.6, 0.3])],
        title="t", x_label="ε", y=Axis("accuracy", 0, 1, percent=True),
    ))  # fmt: skip
    rows = spec["data"]["values"]
    assert [r["text"] for r in rows] == ["90.0%", "90.0%", "40.0%", "n/a", "50.0%", "20.0%"]
    assert sum("lo" in r for r in rows) == 2
    with pytest.raises(ValueError, match="1 values for 2 groups"):
        bar_chart(["a", "b"], [Bars("s", [1.0])], title="t", x_label="x", y=Axis("y", 0, 1))


def test_grid_heatmap_prints_values_and_marks_missing_cells() -> None:
    values = np.array([[0.1, np.nan], [0.3, 0.4]])
    spec = valid(grid_heatmap(values, title="t", row_labels=["0.5", "2"], col_labels=["1", "2"],
                              x_label="f_c", y_label="α", value_label="ACR"))  # fmt: skip
    texts = [r["text"] for r in spec["data"]["values"]]
    assert texts == ["0.10", "–", "0.30", "0.40"]
    with pytest.raises(ValueError, match="do not match"):
        grid_heatmap(values[:1], title="t", row_labels=["a", "b"], col_labels=["1", "2"],
                     x_label="x", y_label="y", value_label="v")  # fmt: skip


def test_frequency_map_conventions() -> None:
    freqs = list(range(-16, 16))
    values = np.full((32, 32), 0.5)
    values[16, 16] = 1.0  # DC
    values[0, 0] = np.nan
    significant = np.zeros((32, 32), dtype=bool)
    significant[16, 16] = True
    spec = valid(frequency_heatmap(values, freqs, title="t", value_label="Δ acc", vmin=-1,
                                   vmax=1, center=0.0, percent=True, significant=significant,
                                   p_values=np.full((32, 32), 0.5)))  # fmt: skip
    rows = spec["data"]["values"]
    dc = next(r for r in rows if r["i"] == 0 and r["j"] == 0)
    assert dc["value"] == 1.0 and dc["significant"] is True
    assert next(r for r in rows if r["i"] == -16 and r["j"] == -16)["value"] is None
    cells = spec["layer"][1]
    scale = cells["encoding"]["color"]["scale"]
    assert scale["scheme"] == "redblue" and scale["domainMid"] == 0.0
    assert cells["encoding"]["opacity"]["condition"]["test"] == "datum.significant"
    circles = {r["edge"] for r in spec["layer"][2]["data"]["values"]}
    assert circles == {"5.33", "10.7"}  # band edges at size/6 and size/3
    with pytest.raises(ValueError, match="strictly between"):
        frequency_heatmap(values, freqs, title="t", value_label="v", vmin=0, vmax=1, center=1)
    with pytest.raises(ValueError, match="do not match"):
        frequency_heatmap(values[:3], freqs, title="t", value_label="v", vmin=0, vmax=1,
                          center=0.5)  # fmt: skip


def test_scatter_with_probit_axes_error_bars_and_fit() -> None:
    spec = valid(scatter_chart(
        [ScatterPoint(0.1, 0.2, "a", x_err=(0, 0.2), y_err=(0.1, 0.3), href="/models/1"),
         ScatterPoint(0.5, 0.4, "b", highlight=True)],
        title="t", x=probit_axis("ID", [0.1, 0.5]), y=probit_axis("OOD", [0.2, 0.4]),
        fit=FitLine(0.8, 0.1, 0.04, "fit"),
    ))  # fmt: skip
    fit = spec["layer"][0]
    assert fit["mark"]["opacity"] == 0.12  # R² below the floor: drawn faint, not invisible
    assert "cumulativeNormal" in spec["layer"][1]["encoding"]["x"]["axis"]["labelExpr"]


def test_specs_render_to_svg_png_and_pdf() -> None:
    spec = line_chart(_curves(), title="Certified accuracy", x=Axis("radius", 0, 1),
                      y=Axis("acc", 0, 1, percent=True))  # fmt: skip
    svg = render(spec, "svg").decode()
    assert svg.startswith("<svg") and "Certified accuracy" in svg and "Bravo (#7)" in svg
    assert render(spec, "png")[:8] == b"\x89PNG\r\n\x1a\n"
    assert render(spec, "pdf")[:5] == b"%PDF-"
    with pytest.raises(ValueError, match="not one of"):
        render(spec, "gif")
