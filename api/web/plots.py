"""Server-side SVG charts: line charts (curves), grouped bar charts and heatmaps, rendered without
any network access.

Why SVG from Python instead of a JavaScript charting library: the pages must read without
JavaScript, print cleanly and work offline, and SVG text stays crisp at any zoom. Colours follow the
Okabe-Ito palette (distinguishable with the common colour-vision deficiencies); every series also
gets its own dash pattern so charts survive black-and-white printing. Tick positions come from
matplotlib's ``MaxNLocator`` (no pyplot, no figure) and heatmap colours from its ``cividis`` map,
which is perceptually uniform and colour-blind safe.

Each series is a ``<g class="series" data-label=... data-xy=...>``: the browser tests count these
and ``static/certbench.js`` reads ``data-xy`` for hover read-outs. Values are in ``<title>``
elements too, so screen readers and no-JS users get them. A series may carry a shaded band (a
simultaneous confidence band, ``api.web.plot_bands``) drawn under its line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
from markupsafe import Markup
from matplotlib import colormaps
from matplotlib.colors import to_hex
from matplotlib.ticker import MaxNLocator

from api.web.plot_bands import band_polygon

#: Okabe & Ito (2008), ordered so the first colours have the best contrast on white; yellow last.
OKABE_ITO = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow
)
#: Dash patterns paired with the colours so series differ in greyscale print as well.
DASHES = ("", "7 3", "2 3", "9 3 2 3", "4 2", "1 2", "12 4", "5 2 1 2")
#: Hatching (white strokes over the colour, 6 px tiles) paired with the colours for bar charts,
#: for the same reason: solid, diagonal, cross-hatched, vertical, horizontal, dotted.
HATCHES = ("", "M-1,7 L7,-1", "M-1,7 L7,-1 M-1,-1 L7,7", "M3,0 L3,6", "M0,3 L6,3", "M3,3 h0.1")
HEATMAP_CMAP = "cividis"
#: Heatmaps are drawn at their natural size times this (never wider than their container).
HEATMAP_SCALE = 1.4

RADIUS_AXIS_LABEL = "radius (ℓ2, [0,1] pixels)"


@dataclass(frozen=True)
class Series:
    """One curve: ``x``/``y`` values; ``emphasis`` draws it thicker (the page's own entry);
    ``markers`` puts a dot with a tooltip on every point (for a few measured values, not for
    curves on a fine grid)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    emphasis: bool = False
    markers: bool = False
    band: tuple[Sequence[float], Sequence[float], str] | None = None
    """(low, high, what it is) at every x: drawn shaded under the curve."""


@dataclass(frozen=True)
class Axis:
    """Axis label (with units) and value range; ticks are chosen by MaxNLocator when omitted."""

    label: str
    lo: float
    hi: float
    ticks: Sequence[float] | None = None
    percent: bool = False


@dataclass(frozen=True)
class Layout:
    """Pixel geometry; the SVG scales with its container through ``viewBox``."""

    width: int = 640
    height: int = 340
    left: int = 62
    right: int = 16
    top: int = 30
    bottom: int = 48
    legend_row: int = 18
    legend_columns: int = 3


def _num(value: float) -> str:
    """Compact coordinates: two decimals are sub-pixel at our sizes and keep the SVG small."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _ticks(axis: Axis, bins: int = 6) -> list[float]:
    if axis.ticks is not None:
        return [float(t) for t in axis.ticks]
    values = MaxNLocator(nbins=bins, steps=[1, 2, 2.5, 5, 10]).tick_values(axis.lo, axis.hi)
    return [float(v) for v in values if axis.lo - 1e-9 <= v <= axis.hi + 1e-9]


def _tick_text(value: float, percent: bool) -> str:
    if percent:
        return f"{value * 100:.0f}%"
    return f"{value:.3g}"


def compact(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Drop interior points of constant runs: a flat stretch needs only its two ends.

    Curves on fine grids (certified accuracy on 0.005-radius steps, p_A on 0.001 steps) are mostly
    flat, so this shrinks the SVG by an order of magnitude without changing the drawn line.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) <= 2:
        return xs, ys
    same_prev = np.r_[False, ys[1:] == ys[:-1]]
    same_next = np.r_[ys[:-1] == ys[1:], False]
    keep = ~(same_prev & same_next)
    return xs[keep], ys[keep]


def _legend(
    labels: Sequence[str], layout: Layout, top: float, *, emphasis: Sequence[bool]
) -> list[str]:
    parts = ['<g class="legend" font-size="12">']
    col_width = (layout.width - layout.left - layout.right) / layout.legend_columns
    for i, label in enumerate(labels):
        row, col = divmod(i, layout.legend_columns)
        x = layout.left + col * col_width
        y = top + row * layout.legend_row
        colour, dash = OKABE_ITO[i % len(OKABE_ITO)], DASHES[i % len(DASHES)]
        width = 3.5 if emphasis[i] else 2
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{_num(x)}" y1="{_num(y)}" x2="{_num(x + 26)}" y2="{_num(y)}" '
            f'stroke="{colour}" stroke-width="{width}"{dash_attr}/>'
            f'<text x="{_num(x + 32)}" y="{_num(y + 4)}">{escape(_clip(label, 34))}</text>'
        )
    parts.append("</g>")
    return parts


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def line_chart(
    series: Sequence[Series],
    *,
    chart_id: str,
    title: str,
    x: Axis,
    y: Axis,
    description: str = "",
    layout: Layout | None = None,
) -> Markup:
    """A multi-series line chart with axes, units, grid lines and a legend under the plot.

    Raises ValueError for empty series lists or series whose x and y lengths differ (a
    programming error in the caller, never user input).
    """
    if not series:
        raise ValueError(f"line_chart {chart_id!r}: needs at least one series")
    layout = layout or Layout()
    rows = math.ceil(len(series) / layout.legend_columns)
    legend_top = layout.height
    total_height = layout.height + rows * layout.legend_row + 6
    plot_w = layout.width - layout.left - layout.right
    plot_h = layout.height - layout.top - layout.bottom
    x_span = (x.hi - x.lo) or 1.0
    y_span = (y.hi - y.lo) or 1.0

    def px(value: float) -> float:
        return layout.left + (value - x.lo) / x_span * plot_w

    def py(value: float) -> float:
        return layout.top + plot_h - (value - y.lo) / y_span * plot_h

    out = [
        f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {layout.width} {total_height}" role="img" '
        f'aria-labelledby="{escape(chart_id)}-title {escape(chart_id)}-desc" '
        f'data-x0="{x.lo}" data-x1="{x.hi}" data-y0="{y.lo}" data-y1="{y.hi}" '
        f'data-plot="{layout.left} {layout.top} {plot_w} {plot_h}" '
        f'data-xlabel="{escape(x.label)}" data-ylabel="{escape(y.label)}" '
        f'data-percent="{int(y.percent)}">',
        f'<title id="{escape(chart_id)}-title">{escape(title)}</title>',
        f'<desc id="{escape(chart_id)}-desc">{escape(description or title)}</desc>',
        f'<text class="chart-title" x="{layout.left}" y="18" font-size="14" '
        f'font-weight="600">{escape(title)}</text>',
        '<g class="grid" stroke="#d0d0d0" stroke-width="1">',
    ]
    for t in _ticks(y):
        out.append(f'<line x1="{layout.left}" x2="{layout.left + plot_w}" y1="{_num(py(t))}" '
                   f'y2="{_num(py(t))}"/>')  # fmt: skip
    for t in _ticks(x, bins=8):
        out.append(f'<line y1="{layout.top}" y2="{layout.top + plot_h}" x1="{_num(px(t))}" '
                   f'x2="{_num(px(t))}"/>')  # fmt: skip
    out.append("</g>")
    out.append('<g class="axes" font-size="12" fill="#222">')
    out.append(
        f'<rect x="{layout.left}" y="{layout.top}" width="{plot_w}" height="{plot_h}" '
        'fill="none" stroke="#444"/>'
    )
    for t in _ticks(y):
        out.append(
            f'<text x="{layout.left - 6}" y="{_num(py(t) + 4)}" text-anchor="end">'
            f"{_tick_text(t, y.percent)}</text>"
        )
    for t in _ticks(x, bins=8):
        out.append(
            f'<text x="{_num(px(t))}" y="{layout.top + plot_h + 16}" text-anchor="middle">'
            f"{_tick_text(t, x.percent)}</text>"
        )
    out.append(
        f'<text class="axis-label" x="{_num(layout.left + plot_w / 2)}" '
        f'y="{layout.top + plot_h + 36}" text-anchor="middle">{escape(x.label)}</text>'
    )
    out.append(
        f'<text class="axis-label" transform="translate(14 {_num(layout.top + plot_h / 2)}) '
        f'rotate(-90)" text-anchor="middle">{escape(y.label)}</text>'
    )
    out.append("</g>")
    out.append(
        f'<clipPath id="{escape(chart_id)}-clip"><rect x="{layout.left}" y="{layout.top}" '
        f'width="{plot_w}" height="{plot_h}"/></clipPath>'
    )
    out.append(f'<g class="plot" clip-path="url(#{escape(chart_id)}-clip)">')
    for i, s in enumerate(series):
        if len(s.x) != len(s.y):
            raise ValueError(f"series {s.label!r}: {len(s.x)} x values but {len(s.y)} y values")
        xs, ys = compact(s.x, s.y)
        colour, dash = OKABE_ITO[i % len(OKABE_ITO)], DASHES[i % len(DASHES)]
        points = " ".join(f"{_num(px(a))},{_num(py(b))}" for a, b in zip(xs, ys, strict=True))
        pairs = zip(xs.round(4).tolist(), ys.round(4).tolist(), strict=True)
        data = json.dumps([[a, b] for a, b in pairs])
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        width = 3.5 if s.emphasis else 2
        out.append(
            f'<g class="series" data-label="{escape(s.label)}" data-colour="{colour}" '
            f"data-xy='{escape(data)}'>"
            f"<title>{escape(s.label)}</title>"
        )
        if s.band is not None:
            low, high, what = s.band
            out.append(band_polygon(s.x, low, high, colour=colour, title=f"{s.label}: {what}",
                                    px=px, py=py, num=_num))  # fmt: skip
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="{width}" '
            f'stroke-linejoin="round"{dash_attr}/>'
        )
        if s.markers:
            for a, b in zip(xs, ys, strict=True):
                out.append(
                    f'<circle cx="{_num(px(a))}" cy="{_num(py(b))}" r="3" fill="{colour}">'
                    f"<title>{escape(s.label)}: {escape(x.label)} {a:g} → "
                    f"{_tick_text(b, y.percent) if y.percent else f'{b:.3f}'}</title></circle>"
                )
        out.append("</g>")
    out.append("</g>")
    out += _legend(
        [s.label for s in series], layout, legend_top, emphasis=[s.emphasis for s in series]
    )
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True)
class Bars:
    """One series of a grouped bar chart: a value per group (None: not measured, no bar)."""

    label: str
    values: Sequence[float | None]


def _value_text(value: float, percent: bool) -> str:
    return f"{value * 100:.1f}%" if percent else f"{value:.3g}"


def bar_chart(
    groups: Sequence[str],
    series: Sequence[Bars],
    *,
    chart_id: str,
    title: str,
    x_label: str,
    y: Axis,
    description: str = "",
    layout: Layout | None = None,
) -> Markup:
    """Grouped bars: one group per ``groups`` label, one bar per series in each, the value
    printed above every bar and in its ``<title>``. Series keep the line charts' colours and get
    hatching so the chart reads in greyscale print; the legend shows the same fills.

    Each series is a ``<g class="series" data-label=...>`` of ``<rect class="bar-rect">``
    elements, which the tests count (not ``bar``: the stylesheet sizes that class for the bands
    table, and CSS sizes win over SVG attributes). Raises ValueError when a series has not one
    value per group.
    """
    if not groups or not series:
        raise ValueError(f"bar_chart {chart_id!r}: needs at least one group and one series")
    for s in series:
        if len(s.values) != len(groups):
            raise ValueError(f"series {s.label!r}: {len(s.values)} values for {len(groups)} groups")
    layout = layout or Layout()
    rows = math.ceil(len(series) / layout.legend_columns)
    total_height = layout.height + rows * layout.legend_row + 6
    plot_w = layout.width - layout.left - layout.right
    plot_h = layout.height - layout.top - layout.bottom
    y_span = (y.hi - y.lo) or 1.0
    group_w = plot_w / len(groups)
    pad = group_w * 0.14
    bar_w = (group_w - 2 * pad) / len(series)
    cid = escape(chart_id)

    def py(value: float) -> float:
        clamped = min(max(value, y.lo), y.hi)
        return layout.top + plot_h - (clamped - y.lo) / y_span * plot_h

    def fill(i: int) -> str:
        return f"url(#{cid}-fill-{i})" if HATCHES[i % len(HATCHES)] else _colour(i)

    out = [
        f'<svg class="chart bar-chart" id="{cid}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {layout.width} {total_height}" role="img" '
        f'aria-labelledby="{cid}-title {cid}-desc">',
        f'<title id="{cid}-title">{escape(title)}</title>',
        f'<desc id="{cid}-desc">{escape(description or title)}</desc>',
        "<defs>",
    ]
    for i in range(len(series)):
        hatch = HATCHES[i % len(HATCHES)]
        if hatch:
            out.append(
                f'<pattern id="{cid}-fill-{i}" width="6" height="6" patternUnits="userSpaceOnUse">'
                f'<rect width="6" height="6" fill="{_colour(i)}"/>'
                f'<path d="{hatch}" stroke="#fff" stroke-width="1.4" stroke-linecap="round"/>'
                "</pattern>"
            )
    out += [
        "</defs>",
        f'<text class="chart-title" x="{layout.left}" y="18" font-size="14" '
        f'font-weight="600">{escape(title)}</text>',
        '<g class="grid" stroke="#d0d0d0" stroke-width="1">',
    ]
    for t in _ticks(y):
        out.append(f'<line x1="{layout.left}" x2="{layout.left + plot_w}" y1="{_num(py(t))}" '
                   f'y2="{_num(py(t))}"/>')  # fmt: skip
    out.append("</g>")
    out.append('<g class="axes" font-size="12" fill="#222">')
    for t in _ticks(y):
        out.append(
            f'<text x="{layout.left - 6}" y="{_num(py(t) + 4)}" text-anchor="end">'
            f"{_tick_text(t, y.percent)}</text>"
        )
    for g, group in enumerate(groups):
        out.append(
            f'<text x="{_num(layout.left + (g + 0.5) * group_w)}" '
            f'y="{layout.top + plot_h + 16}" text-anchor="middle">{escape(group)}</text>'
        )
    out.append(
        f'<text class="axis-label" x="{_num(layout.left + plot_w / 2)}" '
        f'y="{layout.top + plot_h + 36}" text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text class="axis-label" transform="translate(14 {_num(layout.top + plot_h / 2)}) '
        f'rotate(-90)" text-anchor="middle">{escape(y.label)}</text>'
    )
    out.append("</g>")
    base = py(y.lo)
    for i, s in enumerate(series):
        out.append(
            f'<g class="series" data-label="{escape(s.label)}" data-colour="{_colour(i)}" '
            f'font-size="11" fill="#222">'
        )
        for g, (group, value) in enumerate(zip(groups, s.values, strict=True)):
            x = layout.left + g * group_w + pad + i * bar_w
            centre = _num(x + bar_w / 2)
            where = f"{escape(s.label)}, {escape(group)}"
            if value is None or not math.isfinite(value):
                out.append(
                    f'<text class="missing" x="{centre}" y="{_num(base - 4)}" '
                    f'text-anchor="middle">n/a<title>{where}: not measured</title></text>'
                )
                continue
            top = py(value)
            text = _value_text(value, y.percent)
            out.append(
                f'<rect class="bar-rect" x="{_num(x + 1)}" y="{_num(top)}" '
                f'width="{_num(bar_w - 2)}" height="{_num(base - top)}" fill="{fill(i)}" '
                f'stroke="#222" stroke-width="0.75" data-value="{value:.4f}">'
                f"<title>{where}: {text}</title>"
                f'</rect><text x="{centre}" y="{_num(top - 4)}" text-anchor="middle">{text}</text>'
            )
        out.append("</g>")
    out.append(
        f'<line class="baseline" x1="{layout.left}" x2="{layout.left + plot_w}" '
        f'y1="{_num(base)}" y2="{_num(base)}" stroke="#444"/>'
    )
    out.append('<g class="legend" font-size="12">')
    col_width = plot_w / layout.legend_columns
    for i, s in enumerate(series):
        row, col = divmod(i, layout.legend_columns)
        x = layout.left + col * col_width
        top = layout.height + row * layout.legend_row
        out.append(
            f'<rect x="{_num(x)}" y="{_num(top - 7)}" width="20" height="12" fill="{fill(i)}" '
            f'stroke="#222" stroke-width="0.75"/>'
            f'<text x="{_num(x + 26)}" y="{_num(top + 4)}">{escape(_clip(s.label, 34))}</text>'
        )
    out.append("</g></svg>")
    return Markup("".join(out))


def _colour(i: int) -> str:
    return OKABE_ITO[i % len(OKABE_ITO)]


def heatmap(
    values: np.ndarray,
    *,
    chart_id: str,
    title: str,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    x_label: str,
    y_label: str,
    value_label: str,
    vmin: float | None = None,
    vmax: float | None = None,
    cell: int = 34,
) -> Markup:
    """A labelled heatmap (rows × columns) with the value printed in every cell and a colour bar.

    NaN cells (missing results) are drawn hatched grey and say "no result" in their tooltip.
    """
    data = np.asarray(values, dtype=float)
    if data.shape != (len(row_labels), len(col_labels)):
        raise ValueError(
            f"heatmap {chart_id!r}: values shape {data.shape} does not match "
            f"{len(row_labels)} row and {len(col_labels)} column labels"
        )
    finite = data[np.isfinite(data)]
    lo = float(vmin if vmin is not None else (finite.min() if finite.size else 0.0))
    hi = float(vmax if vmax is not None else (finite.max() if finite.size else 1.0))
    span = (hi - lo) or 1.0
    cmap = colormaps[HEATMAP_CMAP]
    left, top = 70, 48
    width = max(left + cell * len(col_labels) + 90, 16 + int(len(title) * 8.5))
    height = top + cell * len(row_labels) + 46
    out = [
        f'<svg class="chart heatmap" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{round(width * HEATMAP_SCALE)}" '
        f'height="{round(height * HEATMAP_SCALE)}" role="img" '
        f'aria-labelledby="{escape(chart_id)}-title">',
        f'<title id="{escape(chart_id)}-title">{escape(title)}</title>',
        f'<defs><pattern id="{escape(chart_id)}-na" width="6" height="6" '
        'patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#eee"/>'
        '<path d="M0,6 L6,0" stroke="#999"/></pattern></defs>',
        f'<text x="8" y="18" font-size="14" font-weight="600">{escape(title)}</text>',
        '<g class="cells" font-size="10">',
    ]
    for r, row_label in enumerate(row_labels):
        for c, col_label in enumerate(col_labels):
            value = data[r, c]
            x, y = left + c * cell, top + r * cell
            where = f"{escape(y_label)} {escape(row_label)}, {escape(x_label)} {escape(col_label)}"
            if not math.isfinite(value):
                out.append(
                    f'<rect class="cell" x="{x}" y="{y}" width="{cell}" height="{cell}" '
                    f'fill="url(#{escape(chart_id)}-na)"><title>{where}: no result</title></rect>'
                )
                continue
            level = min(max((value - lo) / span, 0.0), 1.0)
            rgba = cmap(level)
            luminance = 0.2126 * rgba[0] + 0.7152 * rgba[1] + 0.0722 * rgba[2]
            ink = "#000" if luminance > 0.45 else "#fff"
            out.append(
                f'<g class="cell" data-value="{value:.4f}"><rect x="{x}" y="{y}" width="{cell}" '
                f'height="{cell}" fill="{to_hex(rgba)}" stroke="#fff"/>'
                f'<text x="{x + cell / 2}" y="{y + cell / 2 + 3}" text-anchor="middle" '
                f'fill="{ink}">{value:.2f}</text>'
                f"<title>{where}: {escape(value_label)} {value:.3f}</title></g>"
            )
    out.append("</g>")
    out.append('<g class="axes" font-size="11" fill="#222">')
    for c, col_label in enumerate(col_labels):
        out.append(
            f'<text x="{left + c * cell + cell / 2}" y="{top - 6}" text-anchor="middle">'
            f"{escape(col_label)}</text>"
        )
    for r, row_label in enumerate(row_labels):
        out.append(
            f'<text x="{left - 6}" y="{top + r * cell + cell / 2 + 4}" text-anchor="end">'
            f"{escape(row_label)}</text>"
        )
    bottom = top + cell * len(row_labels)
    out.append(
        f'<text class="axis-label" x="{left + cell * len(col_labels) / 2}" y="{bottom + 20}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
        f'<text class="axis-label" transform="translate(14 {top + cell * len(row_labels) / 2}) '
        f'rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
    )
    out.append("</g>")
    out += _colour_bar(
        x=left + cell * len(col_labels) + 16, top=top, height=cell * len(row_labels),
        lo=lo, hi=hi, label=value_label, chart_id=chart_id,
    )  # fmt: skip
    out.append("</svg>")
    return Markup("".join(out))


def _colour_bar(
    *, x: int, top: int, height: int, lo: float, hi: float, label: str, chart_id: str
) -> list[str]:
    cmap = colormaps[HEATMAP_CMAP]
    stops = "".join(
        f'<stop offset="{i * 10}%" stop-color="{to_hex(cmap(1 - i / 10))}"/>' for i in range(11)
    )
    return [
        f'<defs><linearGradient id="{escape(chart_id)}-bar" x1="0" y1="0" x2="0" y2="1">'
        f"{stops}</linearGradient></defs>",
        f'<g class="colour-bar" font-size="10"><rect x="{x}" y="{top}" width="14" '
        f'height="{height}" fill="url(#{escape(chart_id)}-bar)" stroke="#444"/>',
        f'<text x="{x + 18}" y="{top + 8}">{hi:.2f}</text>',
        f'<text x="{x + 18}" y="{top + height}">{lo:.2f}</text>',
        f'<text x="{x + 18}" y="{top + height / 2 + 4}">{escape(_clip(label, 12))}</text></g>',
    ]
