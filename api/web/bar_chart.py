"""Grouped bar charts as SVG: one group per label, one bar per series in each, the value printed
above every bar and in its ``<title>``. Series keep the line charts' colours and get hatching
(``api.web.plots.HATCHES``) so the chart reads in greyscale print.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from api.web.plots import HATCHES, OKABE_ITO, Axis, Layout, _clip, _num, _tick_text, _ticks


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
