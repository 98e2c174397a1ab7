"""Chart specs: curves with shaded bands, grouped bars with value labels, scatter plots with
error bars and a fitted line. Each builder takes plain numbers and returns a Vega-Lite dict;
Vega-Lite places titles, axes and legends (legends below the plot, in columns).

Every chart keeps what the numbers need: intervals (shaded bands, error bars), hover read-outs
(Vega tooltips: the nearest point's series and values), the Okabe–Ito palette with a dash
pattern per curve (greyscale print), and axis titles with units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from certbench.figures.spec import (
    DASHES,
    HEIGHT,
    OKABE_ITO,
    WIDTH,
    base,
    legend,
    percent_format,
    tooltip_format,
)

#: Accuracies that may label a probit axis.
PROBIT_TICKS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)
PROBIT_LIMIT = NormalDist().inv_cdf(0.999)
#: The faintest a fit line is drawn (R² ≈ 0 would otherwise vanish, which reads as "no fit").
MIN_OPACITY = 0.12
BAND_OPACITY = 0.18
#: Curves' legend: a stroke in the curve's colour and dash (merged from both channels).
LEGEND = {"symbolType": "stroke", "symbolOpacity": 1, "symbolSize": 400}

#: A column of numbers: a list, or a 1-D array (what the figures' callers mostly hold).
Values = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class Axis:
    """Axis title (with units) and value range; ``ticks`` pins tick positions, ``labels`` (a
    Vega expression of ``datum.value``) overrides their text, e.g. accuracies on a probit axis."""

    label: str
    lo: float
    hi: float
    ticks: Sequence[float] | None = None
    percent: bool = False
    labels: str | None = None

    def encoding(self, field: str) -> dict[str, Any]:
        axis: dict[str, Any] = {"format": percent_format(self.percent)}
        if self.ticks is not None:
            axis["values"] = [float(t) for t in self.ticks]
        if self.labels is not None:
            axis["labelExpr"] = self.labels
        return {
            "field": field,
            "type": "quantitative",
            "title": self.label,
            "scale": {"domain": [float(self.lo), float(self.hi)], "nice": False, "zero": False},
            "axis": axis,
        }


@dataclass(frozen=True)
class Curve:
    """One curve; ``emphasis`` draws it thicker (the page's own entry); ``markers`` puts a dot on
    every point (a few measured values, not a fine grid); ``band`` is (low, high, what it is)
    at every x, shaded under the curve."""

    label: str
    x: Values
    y: Values
    emphasis: bool = False
    markers: bool = False
    band: tuple[Values, Values, str] | None = None


def compact(*columns: Values) -> list[np.ndarray]:
    """Drop interior points of runs where every column after the first is constant: a flat
    stretch needs only its two ends. Curves on fine grids (certified accuracy on 0.005-radius
    steps, p_A on 0.001 steps) are mostly flat, so this shrinks a spec by an order of magnitude
    without changing the drawn line."""
    arrays = [np.asarray(c, dtype=float) for c in columns]
    if len(arrays[0]) <= 2:
        return arrays
    values = np.stack(arrays[1:])
    same = np.all((values[:, 1:] == values[:, :-1]) | np.isnan(values[:, 1:]), axis=0)
    same_prev, same_next = np.r_[False, same], np.r_[same, False]
    keep = ~(same_prev & same_next)
    return [a[keep] for a in arrays]


def _number(value: float) -> float | None:
    return round(float(value), 5) if math.isfinite(value) else None


def _column(curve: Curve, name: str, values: Values) -> np.ndarray:
    """``values`` as a 1-D float array; ValueError naming the curve for anything else (a
    scalar, e.g. the mean of no curves, has no points to draw)."""
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(
            f"curve {curve.label!r}: {name} must be a 1-D sequence of numbers, got "
            f"{'a scalar' if array.ndim == 0 else f'shape {array.shape}'}"
        )
    return array


def _curve_rows(curves: Sequence[Curve]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for curve in curves:
        x, y = _column(curve, "x", curve.x), _column(curve, "y", curve.y)
        if len(x) != len(y):
            raise ValueError(f"curve {curve.label!r}: {len(x)} x values but {len(y)} y values")
        columns: list[Values] = [x, y]
        if curve.band is not None:
            low, high = (
                _column(curve, "band low", curve.band[0]),
                _column(curve, "band high", curve.band[1]),
            )
            if not len(low) == len(high) == len(x):
                raise ValueError(f"curve {curve.label!r}: band of another length than x")
            columns += [low, high]
        kept = compact(*columns)
        for k in range(len(kept[0])):
            row: dict[str, Any] = {
                "series": curve.label,
                "x": _number(kept[0][k]),
                "y": _number(kept[1][k]),
                "w": 3.5 if curve.emphasis else 2.0,
            }
            if curve.markers:
                row["marker"] = True
            if curve.band is not None:
                row["lo"], row["hi"] = _number(kept[2][k]), _number(kept[3][k])
                row["band"] = curve.band[2]
            rows.append(row)
    return rows


def _series_scales(labels: Sequence[str]) -> dict[str, Any]:
    n = len(labels)
    colour = {"domain": list(labels), "range": [OKABE_ITO[i % len(OKABE_ITO)] for i in range(n)]}
    dash = {"domain": list(labels), "range": [DASHES[i % len(DASHES)] for i in range(n)]}
    return {
        "color": {"field": "series", "type": "nominal", "title": None, "scale": colour},
        "strokeDash": {"field": "series", "type": "nominal", "title": None, "scale": dash},
    }


def line_chart(
    curves: Sequence[Curve],
    *,
    title: str,
    x: Axis,
    y: Axis,
    description: str = "",
    subtitle: str = "",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> dict[str, Any]:
    """Curves on shared axes with a legend below: shaded bands under their curves, a dot per
    point where asked, and a hover read-out of the nearest point (series, x, y, band).

    Raises ValueError for no curves or a curve whose lengths differ (a caller's bug).
    """
    if not curves:
        raise ValueError(f"line chart {title!r}: needs at least one curve")
    labels = [c.label for c in curves]
    if len(set(labels)) != len(labels):
        raise ValueError(f"line chart {title!r}: curve labels repeat: {labels}")
    scales = _series_scales(labels)
    xs, ys = x.encoding("x"), y.encoding("y")
    tips = [
        {"field": "series", "type": "nominal", "title": "curve"},
        {"field": "x", "type": "quantitative", "title": x.label, "format": ".3~f"},
        {
            "field": "y",
            "type": "quantitative",
            "title": y.label,
            "format": tooltip_format(y.percent),
        },
    ]
    layers: list[dict[str, Any]] = [
        {
            "mark": {"type": "line", "clip": True, "strokeJoin": "round"},
            "encoding": {
                "x": xs,
                "y": ys,
                "color": {**scales["color"], "legend": {**LEGEND, **legend(labels, width)}},
                "strokeDash": scales["strokeDash"],
                "strokeWidth": {"field": "w", "type": "quantitative", "scale": None},
            },
        }
    ]
    if any(c.band is not None for c in curves):  # drawn over the line: light enough to read
        layers.append(
            {
                "transform": [{"filter": "isValid(datum.lo)"}],
                "mark": {"type": "area", "opacity": BAND_OPACITY, "clip": True},
                "encoding": {
                    "x": xs,
                    "y": {**y.encoding("lo")},
                    "y2": {"field": "hi"},
                    "fill": {**scales["color"], "legend": None},
                },
            }
        )
        tips += [
            {"field": "lo", "title": "band low", "format": tooltip_format(y.percent)},
            {"field": "hi", "title": "band high", "format": tooltip_format(y.percent)},
        ]
    if any(c.markers for c in curves):
        layers.append(
            {
                "transform": [{"filter": "datum.marker === true"}],
                "mark": {"type": "point", "filled": True, "size": 36, "clip": True},
                "encoding": {"x": xs, "y": ys, "color": scales["color"], "tooltip": tips},
            }
        )
    layers.append(
        {
            "params": [
                {
                    "name": "hover",
                    "select": {
                        "type": "point",
                        "on": "pointerover",
                        "nearest": True,
                        "clear": "pointerout",
                    },
                }
            ],
            "mark": {"type": "point", "filled": True, "size": 60, "clip": True},
            "encoding": {
                "x": xs,
                "y": ys,
                "color": scales["color"],
                "opacity": {
                    "condition": {"param": "hover", "empty": False, "value": 1},
                    "value": 0,
                },
                "tooltip": tips,
            },
        }
    )
    return {
        **base(title, description=description, subtitle=subtitle),
        "width": width,
        "height": height,
        "data": {"values": _curve_rows(curves)},
        "layer": layers,
    }


@dataclass(frozen=True)
class Bars:
    """One series of a grouped bar chart: a value per group (None: not measured, drawn "n/a"),
    with optional 95 % intervals (``low``/``high`` per group) drawn as error bars."""

    label: str
    values: Sequence[float | None]
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None


def _bar_text(value: float, percent: bool) -> str:
    return f"{value * 100:.1f}%" if percent else f"{value:.3g}"


def bar_chart(
    groups: Sequence[str],
    series: Sequence[Bars],
    *,
    title: str,
    x_label: str,
    y: Axis,
    description: str = "",
    step: int = 36,
) -> dict[str, Any]:
    """Grouped bars: one group per ``groups`` label, one bar per series in each, the value
    printed above every bar (and "n/a" where not measured), error bars where intervals are
    given. Raises ValueError when a series has not one value per group."""
    if not groups or not series:
        raise ValueError(f"bar chart {title!r}: needs at least one group and one series")
    rows = []
    for s in series:
        if len(s.values) != len(groups):
            raise ValueError(f"series {s.label!r}: {len(s.values)} values for {len(groups)} groups")
        for g, (group, value) in enumerate(zip(groups, s.values, strict=True)):
            measured = value if value is not None and math.isfinite(value) else None
            row: dict[str, Any] = {
                "group": group,
                "series": s.label,
                "value": _number(measured) if measured is not None else None,
                "text": _bar_text(measured, y.percent) if measured is not None else "n/a",
                "at": _number(measured) if measured is not None else float(y.lo),
            }
            if s.low is not None and s.high is not None and measured is not None:
                low, high = s.low[g], s.high[g]
                if low is not None and high is not None:
                    row["lo"], row["hi"] = _number(low), _number(high)
            rows.append(row)
    labels = [s.label for s in series]
    colour = {
        "field": "series",
        "type": "nominal",
        "title": None,
        "scale": {"domain": labels, "range": list(OKABE_ITO[: len(labels)])},
        "legend": legend(labels, WIDTH),
    }
    x = {
        "field": "group",
        "type": "nominal",
        "title": x_label,
        "sort": list(groups),
        "axis": {"labelAngle": 0, "labelLimit": 90},
    }
    offset = {"field": "series", "type": "nominal", "sort": labels}
    ys = y.encoding("value")
    tips = [
        {"field": "series", "title": "series"},
        {"field": "group", "title": x_label},
        {"field": "text", "title": y.label},
    ]
    layers: list[dict[str, Any]] = [
        {
            "mark": {"type": "bar", "stroke": "#222", "strokeWidth": 0.6},
            "encoding": {"x": x, "xOffset": offset, "y": ys, "color": colour, "tooltip": tips},
        },
        {
            "mark": {"type": "text", "dy": -5, "fontSize": 10, "baseline": "bottom"},
            "encoding": {
                "x": x,
                "xOffset": offset,
                "y": {**y.encoding("at")},
                "text": {"field": "text"},
            },
        },
    ]
    if any("lo" in row for row in rows):
        layers.insert(
            1,
            {
                "transform": [{"filter": "isValid(datum.lo)"}],
                "mark": {"type": "rule", "color": "#222"},
                "encoding": {
                    "x": x,
                    "xOffset": offset,
                    "y": {**y.encoding("lo")},
                    "y2": {"field": "hi"},
                },
            },
        )
    return {
        **base(title, description=description),
        "width": {"step": step * len(series) + 18},
        "height": 240,
        "data": {"values": rows},
        "layer": layers,
    }


@dataclass(frozen=True)
class ScatterPoint:
    """A point in plot units with optional (low, high) error bars in the same units."""

    x: float
    y: float
    label: str
    x_err: tuple[float, float] | None = None
    y_err: tuple[float, float] | None = None
    href: str | None = None
    highlight: bool = False


@dataclass(frozen=True)
class FitLine:
    """y = intercept + slope·x in plot units; drawn with opacity max(R², MIN_OPACITY)."""

    slope: float
    intercept: float
    r2: float
    label: str


def probit(p: float) -> float:
    """Φ⁻¹(p), clipped to ±Φ⁻¹(0.999) so 0 and 1 stay on the axis."""
    z = NormalDist().inv_cdf(min(max(p, 1e-12), 1 - 1e-12))
    return float(min(max(z, -PROBIT_LIMIT), PROBIT_LIMIT))


def probit_axis(label: str, values: Sequence[float]) -> Axis:
    """An axis over the probits ``values`` (padded), its ticks labelled in accuracy."""
    lo, hi = (min(values), max(values)) if values else (probit(0.1), probit(0.9))
    pad = max(0.1, 0.08 * (hi - lo))
    lo, hi = max(lo - pad, -PROBIT_LIMIT), min(hi + pad, PROBIT_LIMIT)
    ticks = [probit(p) for p in PROBIT_TICKS if lo <= probit(p) <= hi]
    return Axis(label, lo, hi, ticks=ticks, labels="format(cumulativeNormal(datum.value), '.3~%')")


def linear_axis(label: str, values: Sequence[float]) -> Axis:
    """A padded linear axis over ``values``."""
    finite = [v for v in values if math.isfinite(v)] or [0.0, 1.0]
    lo, hi = min(finite), max(finite)
    pad = 0.08 * (hi - lo) or max(abs(lo) * 0.1, 0.05)
    return Axis(label, lo - pad, hi + pad)


def scatter_chart(
    points: Sequence[ScatterPoint],
    *,
    title: str,
    x: Axis,
    y: Axis,
    fit: FitLine | None = None,
    description: str = "",
    width: int = 380,
    height: int = 300,
) -> dict[str, Any]:
    """Points with error bars (a link each where ``href`` is given) and an optional fitted line
    drawn with opacity R², so a line that explains little fades."""
    rows = []
    for p in points:
        row: dict[str, Any] = {
            "x": _number(p.x),
            "y": _number(p.y),
            "label": p.label,
            "highlight": p.highlight,
        }
        if p.x_err:
            row["x_lo"], row["x_hi"] = _number(p.x_err[0]), _number(p.x_err[1])
        if p.y_err:
            row["y_lo"], row["y_hi"] = _number(p.y_err[0]), _number(p.y_err[1])
        if p.href:
            row["href"] = p.href
        rows.append(row)
    xs, ys = x.encoding("x"), y.encoding("y")
    colour = {
        "condition": {"test": "datum.highlight", "value": OKABE_ITO[3]},
        "value": OKABE_ITO[0],
    }
    layers: list[dict[str, Any]] = [
        {
            "transform": [{"filter": "isValid(datum.y_lo)"}],
            "mark": {"type": "rule", "clip": True},
            "encoding": {
                "x": xs,
                "y": y.encoding("y_lo"),
                "y2": {"field": "y_hi"},
                "color": colour,
            },
        },
        {
            "transform": [{"filter": "isValid(datum.x_lo)"}],
            "mark": {"type": "rule", "clip": True},
            "encoding": {
                "y": ys,
                "x": x.encoding("x_lo"),
                "x2": {"field": "x_hi"},
                "color": colour,
            },
        },
        {
            "mark": {
                "type": "point",
                "filled": True,
                "size": 50,
                "clip": True,
                "cursor": "pointer",
            },
            "encoding": {
                "x": xs,
                "y": ys,
                "color": colour,
                "href": {"field": "href"},
                "tooltip": [{"field": "label", "title": "entry"}],
            },
        },
    ]
    if fit is not None and all(map(math.isfinite, (fit.slope, fit.intercept, fit.r2))):
        ends = [
            {"x": v, "y": fit.intercept + fit.slope * v, "fit": fit.label}
            for v in (float(x.lo), float(x.hi))
        ]
        layers.insert(
            0,
            {
                "data": {"values": ends},
                "mark": {
                    "type": "line",
                    "clip": True,
                    "color": OKABE_ITO[1],
                    "strokeWidth": 2.5,
                    "opacity": round(max(fit.r2, MIN_OPACITY), 3),
                },
                "encoding": {"x": xs, "y": ys, "tooltip": [{"field": "fit", "title": "fit"}]},
            },
        )
    return {
        **base(title, description=description),
        "width": width,
        "height": height,
        "data": {"values": rows},
        "layer": layers,
    }
