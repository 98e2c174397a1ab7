"""Server-side SVG of a Fourier sensitivity heatmap: one small cell per grid frequency.

The same conventions as ``certbench.heatmap_plot`` (the CLI's matplotlib figures), drawn as
plain SVG elements so the page stays light, crisp and readable without JavaScript: the lowest
frequency (DC) in the centre and the highest at the edges (seed 000 Fig. 3, Yin et al. 2019);
axes are the centred offsets in cycles per image (i upwards, j to the right); colours come from
ColorBrewer's RdBu, a diverging scale that stays distinguishable with the common colour-vision
deficiencies (red = low, blue = high, white at ``center``); a labelled colour bar is the legend;
dashed circles mark the radial band edges shared with the corruption sets (thirds of Nyquist);
cells without records are hatched grey. Every cell carries its value in a ``<title>`` (tooltips,
screen readers) unless turned off. ``api.web.heatmap_chart.heatmap`` prints a number in every
cell, which a 32 × 32 grid cannot hold; this module is its compact sibling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import numpy as np
from markupsafe import Markup
from matplotlib import colormaps
from matplotlib.colors import to_hex

DIVERGING_CMAP = "RdBu"
"""ColorBrewer RdBu (diverging, colour-blind safe), as ``certbench.heatmap_plot``."""
GRID_PIXELS = 320
"""Side of the cell grid in SVG units, whatever the number of cells."""


def frequency_heatmap(
    values: np.ndarray | Sequence[Sequence[float | None]],
    frequencies: Sequence[int],
    *,
    chart_id: str,
    title: str,
    value_label: str,
    vmin: float,
    vmax: float,
    center: float,
    size: int = 32,
    percent: bool = False,
    tooltips: bool = True,
    description: str = "",
) -> Markup:
    """A K × K map of ``values`` (rows: vertical frequency i ascending, as ``frequencies``;
    columns: horizontal frequency j) for ``size`` × ``size`` images; None/NaN = not computed.

    Colours map [vmin, center] to red…white and [center, vmax] to white…blue. ``tooltips``
    puts each cell's value in a ``<title>`` (about 45 bytes a cell; pages showing many maps turn
    it off). Raises ValueError for mismatched shapes or a centre outside (vmin, vmax).
    """
    data = np.array(
        [[math.nan if v is None else float(v) for v in row] for row in values], dtype=float
    )
    freqs = [int(f) for f in frequencies]
    k = len(freqs)
    if data.shape != (k, k) or k == 0:
        raise ValueError(
            f"frequency heatmap {chart_id!r}: values of shape {data.shape} do not match "
            f"{k} frequencies per axis"
        )
    if not vmin < center < vmax:
        raise ValueError(
            f"frequency heatmap {chart_id!r}: centre {center} must lie strictly between "
            f"vmin {vmin} and vmax {vmax}"
        )
    cell = max(4, GRID_PIXELS // k)
    grid = cell * k
    step = freqs[1] - freqs[0] if k > 1 else 1
    left, top, bottom = 56, 40, 46
    bar_x = left + grid + 18
    width, height = bar_x + 84, top + grid + bottom
    cid = escape(chart_id)
    out = [
        f'<svg class="chart heatmap frequency-map" id="{cid}" '
        f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{round(width * 1.25)}" height="{round(height * 1.25)}" role="img" '
        f'aria-labelledby="{cid}-title {cid}-desc">',
        f'<title id="{cid}-title">{escape(title)}</title>',
        f'<desc id="{cid}-desc">{escape(description or title)}</desc>',
        f'<defs><pattern id="{cid}-na" width="6" height="6" patternUnits="userSpaceOnUse">'
        '<rect width="6" height="6" fill="#eee"/><path d="M0,6 L6,0" stroke="#999"/>'
        "</pattern></defs>",
        f'<text x="8" y="18" font-size="13" font-weight="600">{escape(title)}</text>',
        f'<g class="cells" shape-rendering="crispEdges" data-label="{escape(value_label)}">',
    ]
    for r in range(k):  # top row = highest vertical frequency
        a = k - 1 - r
        for c in range(k):
            value = data[a, c]
            geometry = f'x="{left + c * cell}" y="{top + r * cell}" width="{cell}" height="{cell}"'
            where = f"i {freqs[a]}, j {freqs[c]}"
            if math.isnan(value):
                out.append(
                    f'<rect class="missing" {geometry} fill="url(#{cid}-na)">'
                    f"<title>{where}: not computed</title></rect>"
                )
                continue
            colour = to_hex(_colour(value, vmin, vmax, center))
            tip = f"<title>{where}: {_text(value, percent, 3)}</title>" if tooltips else ""
            out.append(f'<rect {geometry} fill="{colour}">{tip}</rect>')
    out.append("</g>")
    out += _band_circles(freqs, left, top, cell, step, size)
    out += _axes(freqs, left, top, cell, size)
    out += _colour_bar(bar_x, top, grid, (vmin, center, vmax), value_label, percent, cid)
    out.append("</svg>")
    return Markup("".join(out))


def _colour(value: float, vmin: float, vmax: float, center: float) -> tuple[float, ...]:
    """Two-slope normalisation (white exactly at ``center``), clipped to the scale."""
    if value <= center:
        level = 0.5 * (value - vmin) / (center - vmin)
    else:
        level = 0.5 + 0.5 * (value - center) / (vmax - center)
    return colormaps[DIVERGING_CMAP](min(max(level, 0.0), 1.0))


def _text(value: float, percent: bool, digits: int | None = None) -> str:
    """Cell values with ``digits`` decimals; scale ticks (``digits`` None) with 3 significant."""
    if percent:
        return f"{value * 100:.{1 if digits else 0}f}%"
    return f"{value:.{digits}f}" if digits else f"{value:.3g}"


def _band_circles(
    freqs: list[int], left: float, top: float, cell: float, step: int, size: int
) -> list[str]:
    """Dashed circles at the band edges, centred on the DC cell; radius in cells = f / step."""
    if 0 not in freqs:
        return []
    k = len(freqs)
    cx = left + (freqs.index(0) + 0.5) * cell
    cy = top + (k - 1 - freqs.index(0) + 0.5) * cell
    out = ['<g class="band-edges" fill="none">']
    for edge in (size / 6, size / 3):
        circle = f'cx="{cx:.2f}" cy="{cy:.2f}" r="{edge / step * cell:.2f}"'
        out.append(  # a white halo under the dashes keeps them visible on dark cells
            f'<circle {circle} stroke="#fff" stroke-width="2.5" stroke-opacity="0.8"/>'
            f'<circle {circle} stroke="#111" stroke-dasharray="4 3">'
            f"<title>band edge: radial frequency {edge:.3g} cycles/image</title></circle>"
        )
    out.append("</g>")
    return out


def _axes(freqs: list[int], left: float, top: float, cell: float, size: int) -> list[str]:
    """Ticks at multiples of size/4 (−16, −8, 0, 8 for 32 × 32) and the axis labels."""
    k = len(freqs)
    every = max(1, size // 4)
    out = ['<g class="axes" font-size="11" fill="#222">']
    bottom = top + k * cell
    for position, f in enumerate(freqs):
        if f % every:
            continue
        x = left + (position + 0.5) * cell
        y = top + (k - 1 - position + 0.5) * cell
        out.append(f'<text x="{x:.2f}" y="{bottom + 14:.2f}" text-anchor="middle">{f}</text>')
        out.append(f'<text x="{left - 5}" y="{y + 4:.2f}" text-anchor="end">{f}</text>')
    out.append(
        f'<text class="axis-label" x="{left + k * cell / 2:.2f}" y="{bottom + 34:.2f}" '
        'text-anchor="middle">horizontal frequency j (cycles/image)</text>'
        f'<text class="axis-label" transform="translate(14 {top + k * cell / 2:.2f}) '
        'rotate(-90)" text-anchor="middle">vertical frequency i (cycles/image)</text>'
    )
    out.append("</g>")
    return out


def _colour_bar(
    x: float,
    top: float,
    height: int,
    scale: tuple[float, float, float],
    label: str,
    percent: bool,
    cid: str,
) -> list[str]:
    """The legend: the scale from vmax (top) to vmin (bottom), ticks at both ends and the
    centre (placed where the two-slope scale puts it, half-way)."""
    stops = "".join(
        f'<stop offset="{q * 10}%" stop-color="{to_hex(colormaps[DIVERGING_CMAP](1 - q / 10))}"/>'
        for q in range(11)
    )
    vmin, center, vmax = scale
    return [
        f'<defs><linearGradient id="{cid}-bar" x1="0" y1="0" x2="0" y2="1">{stops}'
        "</linearGradient></defs>",
        f'<g class="colour-bar legend" font-size="10"><rect x="{x}" y="{top}" width="14" '
        f'height="{height}" fill="url(#{cid}-bar)" stroke="#444"/>',
        f'<text x="{x + 18}" y="{top + 8}">{_text(vmax, percent)}</text>',
        f'<text x="{x + 18}" y="{top + height / 2 + 4}">{_text(center, percent)}</text>',
        f'<text x="{x + 18}" y="{top + height}">{_text(vmin, percent)}</text>',
        f'<text transform="translate({x + 60} {top + height / 2}) rotate(90)" '
        f'text-anchor="middle">{escape(label)}</text></g>',
    ]
