"""Server-side SVG scatter plots with error bars and a fitted line (the effective-robustness
figures), built on the primitives of ``api.web.plots`` (axes, ticks, palette, compact numbers).

As in Fridovich-Keil et al. 2022 (Figures 2–4): accuracies on probit-scaled axes (tick labels are
accuracies, positions their probits, so the accuracy-on-the-line trend is straight), 95 %
Clopper–Pearson intervals as error bars, and the least-squares line drawn with opacity equal to
its R², so a line that explains little fades. Every point is a ``<g class="point">`` with a
``<title>`` (values for screen readers and no-JS users) and, where given, a link.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup
from scipy.stats import norm

from api.web.plots import OKABE_ITO, Axis, Layout, _num, _tick_text, _ticks

#: Accuracies that may label a probit axis.
PROBIT_TICKS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)
PROBIT_LIMIT = float(norm.ppf(0.999))
#: The faintest a fit line is drawn (R² ≈ 0 would otherwise vanish, which reads as "no fit").
MIN_OPACITY = 0.12


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
    return float(min(max(norm.ppf(min(max(p, 1e-12), 1 - 1e-12)), -PROBIT_LIMIT), PROBIT_LIMIT))


def probit_axis(label: str, values: Sequence[float]) -> tuple[Axis, list[tuple[float, str]]]:
    """An axis over the probits ``values`` (padded) and its accuracy tick labels."""
    lo, hi = (min(values), max(values)) if values else (probit(0.1), probit(0.9))
    pad = max(0.1, 0.08 * (hi - lo))
    lo, hi = max(lo - pad, -PROBIT_LIMIT), min(hi + pad, PROBIT_LIMIT)
    ticks = [(probit(p), f"{p * 100:g}%") for p in PROBIT_TICKS if lo <= probit(p) <= hi]
    return Axis(label, lo, hi, ticks=[t for t, _ in ticks]), ticks


def linear_axis(label: str, values: Sequence[float]) -> tuple[Axis, list[tuple[float, str]]]:
    """A padded linear axis over ``values`` with MaxNLocator ticks."""
    finite = [v for v in values if math.isfinite(v)] or [0.0, 1.0]
    lo, hi = min(finite), max(finite)
    pad = 0.08 * (hi - lo) or max(abs(lo) * 0.1, 0.05)
    axis = Axis(label, lo - pad, hi + pad)
    return axis, [(t, _tick_text(t, False)) for t in _ticks(axis)]


def scatter_chart(
    points: Sequence[ScatterPoint],
    *,
    chart_id: str,
    title: str,
    x: tuple[Axis, Sequence[tuple[float, str]]],
    y: tuple[Axis, Sequence[tuple[float, str]]],
    fit: FitLine | None = None,
    description: str = "",
    layout: Layout | None = None,
) -> Markup:
    """Points with error bars and an optional fitted line, on the given axes and ticks."""
    layout = layout or Layout(width=460, height=360, bottom=52)
    (x_axis, x_ticks), (y_axis, y_ticks) = x, y
    plot_w = layout.width - layout.left - layout.right
    plot_h = layout.height - layout.top - layout.bottom
    cid = escape(chart_id)

    def px(value: float) -> float:
        return layout.left + (value - x_axis.lo) / ((x_axis.hi - x_axis.lo) or 1.0) * plot_w

    def py(value: float) -> float:
        span = (y_axis.hi - y_axis.lo) or 1.0
        return layout.top + plot_h - (value - y_axis.lo) / span * plot_h

    out = [
        f'<svg class="chart scatter" id="{cid}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {layout.width} {layout.height}" role="img" '
        f'aria-labelledby="{cid}-title {cid}-desc">',
        f'<title id="{cid}-title">{escape(title)}</title>',
        f'<desc id="{cid}-desc">{escape(description or title)}</desc>',
        f'<text class="chart-title" x="{layout.left}" y="18" font-size="13" '
        f'font-weight="600">{escape(title)}</text>',
        '<g class="grid" stroke="#e0e0e0" stroke-width="1">',
    ]
    out += [f'<line x1="{layout.left}" x2="{layout.left + plot_w}" y1="{_num(py(t))}" '
            f'y2="{_num(py(t))}"/>' for t, _ in y_ticks]  # fmt: skip
    out += [f'<line y1="{layout.top}" y2="{layout.top + plot_h}" x1="{_num(px(t))}" '
            f'x2="{_num(px(t))}"/>' for t, _ in x_ticks]  # fmt: skip
    out.append('</g><g class="axes" font-size="11" fill="#222">')
    out.append(
        f'<rect x="{layout.left}" y="{layout.top}" width="{plot_w}" height="{plot_h}" '
        'fill="none" stroke="#444"/>'
    )
    out += [f'<text x="{layout.left - 5}" y="{_num(py(t) + 4)}" text-anchor="end">'
            f"{escape(text)}</text>" for t, text in y_ticks]  # fmt: skip
    out += [f'<text x="{_num(px(t))}" y="{layout.top + plot_h + 15}" text-anchor="middle">'
            f"{escape(text)}</text>" for t, text in x_ticks]  # fmt: skip
    out.append(
        f'<text class="axis-label" x="{_num(layout.left + plot_w / 2)}" '
        f'y="{layout.top + plot_h + 34}" text-anchor="middle">{escape(x_axis.label)}</text>'
        f'<text class="axis-label" transform="translate(13 {_num(layout.top + plot_h / 2)}) '
        f'rotate(-90)" text-anchor="middle">{escape(y_axis.label)}</text></g>'
    )
    out.append(
        f'<clipPath id="{cid}-clip"><rect x="{layout.left}" y="{layout.top}" width="{plot_w}" '
        f'height="{plot_h}"/></clipPath><g class="plot" clip-path="url(#{cid}-clip)">'
    )
    if fit is not None and all(map(math.isfinite, (fit.slope, fit.intercept, fit.r2))):
        opacity = max(fit.r2, MIN_OPACITY)
        ends = [(v, fit.intercept + fit.slope * v) for v in (x_axis.lo, x_axis.hi)]
        out.append(
            f'<line class="fit" x1="{_num(px(ends[0][0]))}" y1="{_num(py(ends[0][1]))}" '
            f'x2="{_num(px(ends[1][0]))}" y2="{_num(py(ends[1][1]))}" stroke="{OKABE_ITO[1]}" '
            f'stroke-width="2.5" stroke-opacity="{opacity:.3f}" data-r2="{fit.r2:.4f}" '
            f'data-slope="{fit.slope:.4f}" data-intercept="{fit.intercept:.4f}">'
            f"<title>{escape(fit.label)}</title></line>"
        )
    out += [_point(p, px, py) for p in points]
    out.append("</g></svg>")
    return Markup("".join(out))


def _point(p: ScatterPoint, px: object, py: object) -> str:
    assert callable(px) and callable(py)
    colour = OKABE_ITO[3] if p.highlight else OKABE_ITO[0]
    bars = []
    if p.y_err is not None:
        bars.append(
            f'<line class="err" x1="{_num(px(p.x))}" x2="{_num(px(p.x))}" '
            f'y1="{_num(py(p.y_err[0]))}" y2="{_num(py(p.y_err[1]))}"/>'
        )
    if p.x_err is not None:
        bars.append(
            f'<line class="err" y1="{_num(py(p.y))}" y2="{_num(py(p.y))}" '
            f'x1="{_num(px(p.x_err[0]))}" x2="{_num(px(p.x_err[1]))}"/>'
        )
    body = (
        f'<g class="point" data-x="{p.x:.4f}" data-y="{p.y:.4f}" stroke="{colour}" '
        f'stroke-width="1">{"".join(bars)}<circle cx="{_num(px(p.x))}" cy="{_num(py(p.y))}" '
        f'r="{4.5 if p.highlight else 3.5}" fill="{colour}"/><title>{escape(p.label)}</title></g>'
    )
    return f'<a href="{escape(p.href)}">{body}</a>' if p.href else body
