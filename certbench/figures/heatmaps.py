"""Heatmap specs: a labelled grid with the value printed in every cell (ACR over α × f_c) and the
Fourier sensitivity map (one cell per grid frequency, DC in the centre).

Conventions of the frequency maps (Sun et al., ECCV 2022, Fig. 3, after Yin et al. 2019): the lowest
frequency in the centre and the highest at the edges; axes are the centred offsets in cycles per
image (i upwards, j to the right); colours are ColorBrewer's RdBu (Vega's ``redblue``: diverging and
colour-blind safe, red low, blue high, white at the centre value); dashed circles mark the radial
band edges shared with the corruption sets (thirds of Nyquist); cells that were not computed are
grey. A difference map may carry a significance grid (:mod:`certbench.figures.difference`): cells
whose difference is within the noise floor are washed out, so only real differences keep colour.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from certbench.figures.spec import base, tooltip_format

MISSING = "#9a9a9a"
FADED_OPACITY = 0.22
"""Opacity of a difference-map cell whose difference is not significant."""


def grid_heatmap(
    values: np.ndarray,
    *,
    title: str,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    x_label: str,
    y_label: str,
    value_label: str,
    description: str = "",
    cell: int = 42,
) -> dict[str, Any]:
    """Rows × columns with the value printed in every cell (cividis: perceptually uniform and
    colour-blind safe); NaN cells are grey and say "no result". Raises ValueError on a shape
    mismatch."""
    data = np.asarray(values, dtype=float)
    if data.shape != (len(row_labels), len(col_labels)):
        raise ValueError(
            f"heatmap {title!r}: values of shape {data.shape} do not match "
            f"{len(row_labels)} row and {len(col_labels)} column labels"
        )
    rows = []
    for r, row_label in enumerate(row_labels):
        for c, col_label in enumerate(col_labels):
            value = float(data[r, c])
            finite = math.isfinite(value)
            rows.append(
                {
                    "row": row_label,
                    "col": col_label,
                    "value": round(value, 4) if finite else None,
                    "text": f"{value:.2f}" if finite else "–",
                }
            )
    finite = data[np.isfinite(data)]
    mid = float((finite.min() + finite.max()) / 2) if finite.size else 0.0
    x = {
        "field": "col",
        "type": "ordinal",
        "title": x_label,
        "sort": list(col_labels),
        "axis": {"labelAngle": 0},
    }
    y = {"field": "row", "type": "ordinal", "title": y_label, "sort": list(row_labels)}
    return {
        **base(title, description=description),
        "width": {"step": cell},
        "height": {"step": cell},
        "data": {"values": rows},
        "layer": [
            {
                "transform": [{"filter": "!isValid(datum.value)"}],
                "mark": {"type": "rect", "stroke": "white", "color": MISSING},
                "encoding": {
                    "x": x,
                    "y": y,
                    "tooltip": [
                        {"field": "row", "title": y_label},
                        {"field": "col", "title": x_label},
                        {"field": "text", "title": "no result"},
                    ],
                },
            },
            {
                "mark": {"type": "rect", "stroke": "white"},
                "encoding": {
                    "x": x,
                    "y": y,
                    "color": {
                        "field": "value",
                        "type": "quantitative",
                        "title": value_label,
                        "scale": {"scheme": "cividis"},
                        "legend": {"orient": "right", "direction": "vertical"},
                    },
                    "tooltip": [
                        {"field": "row", "title": y_label},
                        {"field": "col", "title": x_label},
                        {"field": "text", "title": value_label},
                    ],
                },
            },
            {
                "mark": {"type": "text", "fontSize": 10},
                "encoding": {
                    "x": x,
                    "y": y,
                    "text": {"field": "text"},
                    "color": {
                        "condition": {"test": f"datum.value > {mid}", "value": "black"},
                        "value": "white",
                    },
                },
            },
        ],
    }


def _band_circles(frequencies: Sequence[int], size: int) -> list[dict[str, Any]]:
    """Points along the two band-edge circles (radius size/6 and size/3 cycles per image)."""
    if 0 not in frequencies:
        return []
    rows = []
    for edge in (size / 6, size / 3):
        for k in range(73):
            angle = 2 * math.pi * k / 72
            rows.append(
                {
                    "edge": f"{edge:.3g}",
                    "k": k,
                    "j": round(edge * math.cos(angle), 3),
                    "i": round(edge * math.sin(angle), 3),
                }
            )
    return rows


def frequency_heatmap(
    values: np.ndarray | Sequence[Sequence[float | None]],
    frequencies: Sequence[int],
    *,
    title: str,
    value_label: str,
    vmin: float,
    vmax: float,
    center: float,
    size: int = 32,
    percent: bool = False,
    description: str = "",
    significant: np.ndarray | None = None,
    p_values: np.ndarray | None = None,
    side: int = 300,
) -> dict[str, Any]:
    """A K × K map of ``values`` (rows: vertical frequency i ascending, as ``frequencies``;
    columns: horizontal frequency j) for ``size`` × ``size`` images; None/NaN = not computed.

    ``significant`` (K × K booleans, a difference map's) washes out the cells that are not
    significant; ``p_values`` (adjusted) go into their tooltips. Raises ValueError for
    mismatched shapes or a centre outside (vmin, vmax).
    """
    data = np.array(
        [[math.nan if v is None else float(v) for v in row] for row in values], dtype=float
    )
    freqs = [int(f) for f in frequencies]
    k = len(freqs)
    if data.shape != (k, k) or k == 0:
        raise ValueError(
            f"frequency heatmap {title!r}: values of shape {data.shape} do not match "
            f"{k} frequencies per axis"
        )
    if not vmin < center < vmax:
        raise ValueError(
            f"frequency heatmap {title!r}: centre {center} must lie strictly between "
            f"vmin {vmin} and vmax {vmax}"
        )
    for name, grid in (("significant", significant), ("p_values", p_values)):
        if grid is not None and np.shape(grid) != (k, k):
            raise ValueError(f"frequency heatmap {title!r}: {name} is not {k} × {k}")
    step = freqs[1] - freqs[0] if k > 1 else 1
    fmt = tooltip_format(percent)
    rows = []
    for a in range(k):
        for b in range(k):
            value = data[a, b]
            row: dict[str, Any] = {
                "i": freqs[a],
                "j": freqs[b],
                "value": round(float(value), 5) if math.isfinite(value) else None,
            }
            if significant is not None:
                row["significant"] = bool(significant[a, b])
            if p_values is not None and math.isfinite(p_values[a, b]):
                row["p"] = float(p_values[a, b])
            rows.append(row)
    half = step / 2
    domain = [freqs[0] - half, freqs[-1] + half]
    every = max(1, size // 4)
    ticks = [f for f in freqs if f % every == 0]
    x = {
        "field": "j",
        "type": "quantitative",
        "title": "horizontal frequency j (cycles/image)",
        "scale": {"domain": domain, "nice": False, "zero": False},
        "axis": {"values": ticks, "grid": False, "format": "d"},
    }
    y = {
        "field": "i",
        "type": "quantitative",
        "title": "vertical frequency i (cycles/image)",
        "scale": {"domain": domain, "nice": False, "zero": False},
        "axis": {"values": ticks, "grid": False, "format": "d"},
    }
    tips = [
        {"field": "i", "title": "i"},
        {"field": "j", "title": "j"},
        {"field": "value", "title": value_label, "format": fmt},
    ]
    if p_values is not None:
        tips.append({"field": "p", "title": "adjusted p", "format": ".3g"})
    if significant is not None:
        tips.append({"field": "significant", "title": "significant"})
    cells: dict[str, Any] = {
        "mark": {"type": "rect"},
        "transform": [
            {"calculate": f"datum.j - {half}", "as": "j0"},
            {"calculate": f"datum.j + {half}", "as": "j1"},
            {"calculate": f"datum.i - {half}", "as": "i0"},
            {"calculate": f"datum.i + {half}", "as": "i1"},
        ],
        "encoding": {
            "x": {**x, "field": "j0"},
            "x2": {"field": "j1"},
            "y": {**y, "field": "i0"},
            "y2": {"field": "i1"},
            "color": {
                "field": "value",
                "type": "quantitative",
                "title": value_label,
                "scale": {
                    "scheme": "redblue",
                    "domain": [vmin, vmax],
                    "domainMid": center,
                    "clamp": True,
                },
                "legend": {
                    "orient": "right",
                    "direction": "vertical",
                    "format": ".0%" if percent else ".3~f",
                    "gradientLength": side - 40,
                },
            },
            "tooltip": tips,
        },
    }
    if significant is not None:
        cells["encoding"]["opacity"] = {
            "condition": {"test": "datum.significant", "value": 1},
            "value": FADED_OPACITY,
        }
    missing = {
        **cells,
        "transform": [
            {"filter": "!isValid(datum.value)"},
            {"calculate": "'not computed'", "as": "state"},
            *cells["transform"],
        ],
        "mark": {"type": "rect", "color": MISSING},
        "encoding": {key: cells["encoding"][key] for key in ("x", "x2", "y", "y2")},
    }
    missing["encoding"]["tooltip"] = [*tips[:2], {"field": "state", "title": value_label}]
    layers: list[dict[str, Any]] = [missing, cells]
    circles = _band_circles(freqs, size)
    if circles:
        edge = {
            "data": {"values": circles},
            "encoding": {
                "x": {**x, "field": "j"},
                "y": {**y, "field": "i"},
                "detail": {"field": "edge"},
                "order": {"field": "k", "type": "quantitative"},
            },
        }
        layers.append(
            {
                **edge,
                "mark": {
                    "type": "line",
                    "stroke": "white",
                    "strokeWidth": 2.5,
                    "opacity": 0.8,
                    "clip": True,
                },
            }
        )
        layers.append(
            {
                **edge,
                "mark": {
                    "type": "line",
                    "stroke": "#111",
                    "strokeDash": [4, 3],
                    "strokeWidth": 1,
                    "clip": True,
                },
            }
        )
    return {
        **base(title, description=description),
        "width": side,
        "height": side,
        "data": {"values": rows},
        "layer": layers,
    }
