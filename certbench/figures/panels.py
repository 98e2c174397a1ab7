"""The paper figures the command line writes, from the same specs as the web pages: Fourier
sensitivity maps (``certbench fourier-heatmap``), the worst-case weather example panels (Wang
et al., NeurIPS 2022 ML Safety Workshop, Fig. 1) and the PD threat scatter (Muthukumar et al. 2025,
arXiv:2501.18098, Fig. 5).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from certbench.figures.charts import Axis
from certbench.figures.heatmaps import frequency_heatmap
from certbench.figures.rendering import save
from certbench.figures.spec import OKABE_ITO, base
from certbench.pd import LINF_THRESHOLD, PD_THRESHOLD

if TYPE_CHECKING:
    from certbench.fourier import Heatmap
    from certbench.weather import WeatherExample

#: Columns of a weather example panel.
PANEL_COLUMNS = ("clean", "random", "attacked", "|attacked − random|")


def fourier_heatmap_figure(
    heatmap: Heatmap, *, kind: str, name: str, epsilon: float
) -> dict[str, Any]:
    """One map of ``certbench fourier-heatmap``: ``kind`` "base_accuracy" (on [0, 1] around ½)
    or "acr" (on [0, largest cell] around half of it). Raises ValueError for another kind or a
    base-only heatmap asked for its ACR."""
    if kind == "base_accuracy":
        values, label, scale, percent = (
            heatmap.base_accuracy,
            "accuracy (no smoothing)",
            (0.0, 0.5, 1.0),
            True,
        )
        what = "base classifier accuracy"
    elif kind == "acr" and heatmap.acr is not None:
        values, label, percent, what = (
            heatmap.acr,
            "ACR (ℓ2 radius)",
            False,
            "smoothed classifier ACR",
        )
        top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
        top = top or 1e-3
        scale = (0.0, top / 2, top)
    else:
        raise ValueError(f"no {kind!r} map in this heatmap (base_accuracy, or acr when smoothed)")
    low, centre, high = scale
    return frequency_heatmap(
        values,
        [int(f) for f in heatmap.frequencies],
        title=f"{name}: {what}, ε = {epsilon:g}",
        value_label=label,
        vmin=low,
        vmax=high,
        center=centre,
        size=heatmap.size,
        percent=percent,
        description=f"Fourier sensitivity heatmap of {name}: {what} under x + r·ε·U_ij; centre = "
        "lowest frequency; grey cells were not computed.",
    )


def _png_url(picture: np.ndarray, scale: int) -> str:
    from PIL import Image

    pixels = (np.clip(picture, 0, 1) * 255).round().astype(np.uint8)
    tile = Image.fromarray(pixels)
    tile = tile.resize((tile.width * scale, tile.height * scale), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    tile.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def weather_panel_figure(
    examples: Sequence[WeatherExample], *, positions: Sequence[int] | None = None, scale: int = 3
) -> dict[str, Any]:
    """Wang et al., NeurIPS 2022 ML Safety Workshop, Fig. 1 as a spec: one row per image (labelled
    by its test position, its label and the base classifier's predictions), columns clean / random /
    attacked /
    |attacked − random| (divided by its maximum over the panel: black means identical).

    ``positions`` are the images' positions in the test set (default: their source indices).
    Raises ValueError for no examples or a scale below 1.
    """
    if not examples or scale < 1:
        raise ValueError(f"need at least one example and scale ≥ 1 (got {len(examples)}, {scale})")
    positions = list(positions) if positions is not None else [e.index for e in examples]
    peak = max(float(np.abs(e.difference).max()) for e in examples) or 1.0
    side = examples[0].clean.shape[0] * scale
    rows = []
    for e, position in zip(examples, positions, strict=True):
        row = (
            f"test image {position}: label {e.label}, random → {e.random_prediction}, "
            f"attacked → {e.attacked_prediction}"
        )
        pictures = (e.clean, e.random, e.attacked, np.abs(e.difference) / peak)
        for column, picture in zip(PANEL_COLUMNS, pictures, strict=True):
            rows.append({"row": row, "column": column, "url": _png_url(picture, scale)})
    first = examples[0]
    return {
        **base(
            f"{first.weather}, severity {first.severity}: random weather vs the simulation attack",
            description="clean, random, attacked and |attacked − random| per image",
        ),
        "data": {"values": rows},
        "width": {"step": side + 12},
        "height": {"step": side + 12},
        "mark": {"type": "image", "width": side, "height": side},
        "encoding": {
            "x": {
                "field": "column",
                "type": "nominal",
                "sort": list(PANEL_COLUMNS),
                "title": None,
                "axis": {"orient": "top", "labelAngle": 0, "domain": False, "ticks": False},
            },
            "y": {
                "field": "row",
                "type": "nominal",
                "title": None,
                "sort": None,
                "axis": {"domain": False, "ticks": False, "labelLimit": 360},
            },
            "url": {"field": "url", "type": "nominal"},
        },
        "config": {**base("", description="")["config"], "view": {"stroke": None}},
    }


def write_weather_panel(
    examples: Sequence[WeatherExample], path: str | Path, *, positions: Sequence[int] | None = None
) -> Path:
    """The panel as a PNG at ``path`` (atomically)."""
    target = Path(path)
    (written,) = save(
        weather_panel_figure(examples, positions=positions),
        target.with_suffix(""),
        formats=("png",),
    )
    return written


def threat_figure(sets: Sequence[dict[str, Any]], unsafe: dict[str, float]) -> dict[str, Any]:
    """Muthukumar et al. 2025, arXiv:2501.18098, Fig. 5: mean d_∞ (x) against mean d_PD (y) per
    corruption set (size = severity), the unsafe pairs as a star, the quadrant thresholds as rules.
    ``sets`` rows: corruption, severity, d_inf, d_pd; ``unsafe``: d_inf, d_pd."""
    corruptions = sorted({s["corruption"] for s in sets})
    points = [{**s, "kind": "corruption set"} for s in sets]
    points.append({"corruption": "unsafe pairs", "severity": 3, "kind": "unsafe pairs", **unsafe})
    palette = [OKABE_ITO[i % 7] for i in range(len(corruptions))] + ["#000000"]
    xs = Axis("mean d∞ (pixels in [0, 1])", 0.0, max(p["d_inf"] for p in points) * 1.1).encoding(
        "d_inf"
    )
    ys = Axis(
        "mean d_PD", 0.0, max(max(p["d_pd"] for p in points) * 1.1, PD_THRESHOLD * 1.2)
    ).encoding("d_pd")
    return {
        **base(
            "PD threat vs ℓ∞ threat per corruption (size = severity)",
            description="mean d_∞ against mean d_PD per corruption set",
        ),
        "width": 460,
        "height": 340,
        "layer": [
            {
                "data": {"values": points},
                "mark": {"type": "point", "filled": True, "opacity": 0.85},
                "encoding": {
                    "x": xs,
                    "y": ys,
                    "color": {
                        "field": "corruption",
                        "type": "nominal",
                        "title": None,
                        "scale": {"domain": [*corruptions, "unsafe pairs"], "range": palette},
                    },
                    "shape": {
                        "field": "kind",
                        "type": "nominal",
                        "title": None,
                        "scale": {
                            "domain": ["corruption set", "unsafe pairs"],
                            "range": ["circle", "diamond"],
                        },
                    },
                    "size": {"field": "severity", "type": "quantitative", "title": "severity"},
                    "tooltip": [
                        {"field": "corruption"},
                        {"field": "severity"},
                        {"field": "d_inf", "format": ".3f"},
                        {"field": "d_pd", "format": ".3f"},
                    ],
                },
            },
            {
                "data": {"values": [{"y": PD_THRESHOLD}]},
                "mark": {"type": "rule", "strokeDash": [5, 3], "color": "grey"},
                "encoding": {"y": {"field": "y", "type": "quantitative"}},
            },
            {
                "data": {"values": [{"x": LINF_THRESHOLD}]},
                "mark": {"type": "rule", "strokeDash": [2, 3], "color": "grey"},
                "encoding": {"x": {"field": "x", "type": "quantitative"}},
            },
        ],
    }
