"""Labelled heatmaps as SVG (rows x columns) with the value printed in every cell and a colour
bar. Colours come from matplotlib's ``cividis`` map, which is perceptually uniform and
colour-blind safe; missing results are drawn hatched grey.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import numpy as np
from markupsafe import Markup
from matplotlib import colormaps
from matplotlib.colors import to_hex

from api.web.plots import _clip

HEATMAP_CMAP = "cividis"
#: Heatmaps are drawn at their natural size times this (never wider than their container).
HEATMAP_SCALE = 1.4


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
