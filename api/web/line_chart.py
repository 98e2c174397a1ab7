"""Line charts of curves (certified accuracy against radius, p_A distributions, ...) as SVG.

Each series is a ``<g class="series" data-label=... data-xy=...>``: the browser tests count these
and ``static/certbench.js`` reads ``data-xy`` for hover read-outs. Values are in ``<title>``
elements too, so screen readers and no-JS users get them. A series may carry a shaded band (a
simultaneous confidence band, ``api.web.plot_bands``) drawn under its line. Flat stretches of a
curve keep only their two ends (:func:`compact`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
from markupsafe import Markup

from api.web.plot_bands import band_polygon
from api.web.plots import DASHES, OKABE_ITO, Axis, Layout, _clip, _num, _tick_text, _ticks


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
