"""Shaded bands under a chart's curves (``api.web.line_chart.line_chart``): a simultaneous
confidence band is drawn as one filled polygon in the series' colour, light enough that the curves
of other series stay readable over it, with its meaning in a ``<title>`` for screen readers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

import numpy as np

BAND_OPACITY = 0.18


def band_polygon(
    x: Sequence[float],
    low: Sequence[float],
    high: Sequence[float],
    *,
    colour: str,
    title: str,
    px: Callable[[float], float],
    py: Callable[[float], float],
    num: Callable[[float], str],
) -> str:
    """SVG ``<polygon class="band">``: along ``high`` left to right, back along ``low``.

    Raises ValueError when the three sequences differ in length (a programming error)."""
    xs, lo, hi = (np.asarray(v, dtype=float) for v in (x, low, high))
    if not len(xs) == len(lo) == len(hi):
        raise ValueError(f"band of {len(xs)} x values, {len(lo)} lows and {len(hi)} highs")
    upper = [f"{num(px(a))},{num(py(b))}" for a, b in zip(xs, hi, strict=True)]
    lower = [f"{num(px(a))},{num(py(b))}" for a, b in zip(xs[::-1], lo[::-1], strict=True)]
    return (
        f'<polygon class="band" points="{" ".join(upper + lower)}" fill="{colour}" '
        f'fill-opacity="{BAND_OPACITY}" stroke="none"><title>{escape(title)}</title></polygon>'
    )
