"""Server-side SVG charts: what every chart kind shares (palette, axes, layout, number formatting).

The chart kinds are ``api.web.line_chart`` (curves), ``api.web.bar_chart`` (grouped bars),
``api.web.heatmap_chart`` (heatmaps) and ``api.web.scatter`` (scatter plots with fitted lines),
all rendered without any network access.

Why SVG from Python instead of a JavaScript charting library: the pages must read without
JavaScript, print cleanly and work offline, and SVG text stays crisp at any zoom. Colours follow the
Okabe-Ito palette (distinguishable with the common colour-vision deficiencies); every series also
gets its own dash pattern so charts survive black-and-white printing. Tick positions come from
matplotlib's ``MaxNLocator`` (no pyplot, no figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.ticker import MaxNLocator

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

RADIUS_AXIS_LABEL = "radius (ℓ2, [0,1] pixels)"


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


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
