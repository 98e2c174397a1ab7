"""The Fourier sensitivity stage's figures: its leaderboard columns and REST fields with their
help texts (mean ACR of the smoothed map and base accuracy per radial band, Sun et al., ECCV 2022,
§2.2; the base map is Yin et al., NeurIPS 2019's), and their values from the merged map's band
means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.stages.base import MetricSpec
from models.stages.fourier_sensitivity.text import band_range, protocol_note

BANDS = ("low", "mid", "high")
PAPER = "Sun et al. 2022, “A Spectral View of Randomized Smoothing under Common Corruptions”"
KEYS = {
    "acr": {band: f"fourier_acr_{band}" for band in BANDS},
    "base_accuracy": {band: f"fourier_base_{band}" for band in BANDS},
}
"""Leaderboard metric keys: mean ACR (smoothed) and base accuracy per radial band."""


def fourier_metric_specs(protocol: Mapping[str, Any] | None) -> list[MetricSpec]:
    """Mean ACR per radial band of the smoothed map (columns), the base classifier's
    accuracy per band (columns only when the benchmark skips the smoothed map; otherwise
    REST fields and sort keys); none for a benchmark without the stage."""
    if protocol is None:
        return []
    smoothed = bool(protocol.get("smoothed", True))
    run = protocol_note(protocol)
    size = int(protocol.get("grid_size", 32))
    specs = [
        MetricSpec(
            KEYS["acr"][band],
            f"Fourier ACR {band}",
            f"mean ACR of the smoothed classifier over the {band_range(band, size)} cells "
            f"of the Fourier sensitivity heatmap (x + r·ε·U_ij, one cell per Fourier basis "
            f"image; {PAPER}, §2.2){run}",
            "radius",
            group="fourier",
            column=smoothed,
        )
        for band in BANDS
    ]
    specs += [
        MetricSpec(
            KEYS["base_accuracy"][band],
            f"Fourier base {band}",
            f"mean accuracy of the base classifier (not smoothed) over the "
            f"{band_range(band, size)} cells of the Fourier sensitivity heatmap "
            f"(Yin et al. 2019's map, as in {PAPER}){run}",
            "percent",
            group="fourier",
            column=not smoothed,
        )
        for band in BANDS
    ]
    return specs


def leaderboard_metrics(bands: Mapping[str, Any]) -> dict[str, float | None]:
    """Band means of both maps (None for the smoothed map of a base-only benchmark)."""
    out: dict[str, float | None] = {}
    for name, keys in KEYS.items():
        entry = bands.get(name)
        for band, key in keys.items():
            out[key] = None if entry is None else entry["bands"][band]
    return out
