"""Web sections of the Fourier sensitivity stage: the heatmaps on the model page (smoothed ACR and
base accuracy, band means, protocol and cost) and, on the compare page, the entries' maps side by
side on one colour scale with each entry's difference to the first.

The data is the stage's stored summary (``models.stages.fourier_sensitivity``), the same JSON
``/api/v1/results/{id}`` serves in its ``stages`` list; maps are drawn by
``api.web.frequency_heatmap``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from markupsafe import Markup

from api.schemas import ResultsPublic
from api.web.frequency_heatmap import frequency_heatmap
from models.stages.fourier_sensitivity import BANDS, MERGED, band_edges, cost_text

STAGE = "fourier_sensitivity"
TEMPLATE = "stages/fourier_sensitivity.html"
COMPARE_TEMPLATE = "stages/fourier_sensitivity_compare.html"
MAPS = {
    "acr": ("ACR of the smoothed classifier", "ACR (ℓ2 radius)", False),
    "base_accuracy": ("accuracy of the base classifier (not smoothed)", "accuracy", True),
}
"""map key → (what it shows, colour-bar label, drawn as percent)."""


@dataclass(frozen=True)
class FourierMaps:
    """A stored Fourier-sensitivity result as the pages read it (arrays: rows = vertical
    frequency i ascending, columns = horizontal frequency j; NaN = not computed)."""

    label: str
    description: str
    smoothed: bool
    sigma: float | None
    epsilon: float
    n0: int
    n: int
    alpha: float
    images: int
    points: int
    forward_passes: int
    size: int
    frequencies: list[int]
    acr: np.ndarray | None
    base_accuracy: np.ndarray
    counts: list[list[int]]
    bands: dict[str, Any]
    evaluator_version: str
    seconds: float

    @property
    def paper(self) -> bool:
        return self.label == "paper"

    @property
    def cost(self) -> str:
        return cost_text(self.forward_passes)

    def values(self, kind: str) -> np.ndarray | None:
        return self.acr if kind == "acr" else self.base_accuracy


def _array(grid: Sequence[Sequence[float | None]] | None) -> np.ndarray | None:
    if grid is None:
        return None
    return np.array([[np.nan if v is None else v for v in row] for row in grid], dtype=float)


def fourier_maps(results: ResultsPublic) -> FourierMaps | None:
    """The entry's merged Fourier-sensitivity result, or None when it has none."""
    row = next((s for s in results.stages if s.stage == STAGE and s.unit == MERGED), None)
    if row is None:
        return None
    summary, protocol = row.summary, row.summary["protocol"]
    heatmap = summary["heatmap"]
    base = _array(heatmap["base_accuracy"])
    assert base is not None  # always computed
    return FourierMaps(
        label=summary["label"],
        description=summary["description"],
        smoothed=summary["smoothed"],
        sigma=summary["sigma"],
        epsilon=protocol["epsilon"],
        n0=protocol["n0"],
        n=protocol["n"],
        alpha=protocol["alpha"],
        images=summary["images"],
        points=summary["points"],
        forward_passes=summary["forward_passes"],
        size=heatmap["size"],
        frequencies=list(heatmap["frequencies"]),
        acr=_array(heatmap["acr"]),
        base_accuracy=base,
        counts=heatmap["images"],
        bands=summary["bands"],
        evaluator_version=row.evaluator_version,
        seconds=row.seconds,
    )


def _scale(kind: str, arrays: Sequence[np.ndarray]) -> tuple[float, float, float]:
    """(vmin, centre, vmax): accuracy on [0, 1] around ½; ACR on [0, largest cell] around half
    of it, shared by every map drawn together so colours compare."""
    if kind == "base_accuracy":
        return 0.0, 0.5, 1.0
    finite = [float(np.nanmax(a)) for a in arrays if np.isfinite(a).any()]
    top = max([*finite, 0.0]) or 1e-3
    return 0.0, top / 2, top


def _map_chart(
    maps: FourierMaps, kind: str, *, chart_id: str, name: str, scale: tuple[float, float, float]
) -> Markup:
    what, label, percent = MAPS[kind]
    values = maps.values(kind)
    assert values is not None
    low, centre, high = scale
    return frequency_heatmap(
        values,
        maps.frequencies,
        chart_id=chart_id,
        title=f"{name}: {what}",
        value_label=label,
        vmin=low,
        vmax=high,
        center=centre,
        size=maps.size,
        percent=percent,
        counts=maps.counts,
        description=(
            f"Fourier sensitivity heatmap of {name}: {what} under x + r·ε·U_ij, ε = "
            f"{maps.epsilon:g}, for each Fourier basis image U_ij; centre = lowest frequency."
        ),
    )


@dataclass(frozen=True)
class BandRow:
    band: str
    range: str
    acr: float | None
    base_accuracy: float | None


def band_rows(maps: FourierMaps) -> list[BandRow]:
    """Mean per radial band (and over every cell) of both maps."""
    low, high = band_edges(maps.size)
    ranges = {"low": f"< {low:.3g}", "mid": f"{low:.3g} – {high:.3g}", "high": f"≥ {high:.3g}",
              "all": "every cell"}  # fmt: skip

    def mean(kind: str, band: str) -> float | None:
        entry = maps.bands.get(kind)
        return None if entry is None else entry["bands"].get(band)

    return [
        BandRow(band, ranges[band], mean("acr", band), mean("base_accuracy", band))
        for band in (*BANDS, "all")
    ]


def context(results: ResultsPublic) -> dict[str, Any]:
    """What the model-page partial reads besides ``results``, ``benchmark`` and ``active``."""
    maps = fourier_maps(results)
    if maps is None:
        return {}
    charts = [
        _map_chart(
            maps,
            kind,
            chart_id=f"fourier-{kind.replace('_', '-')}",
            name=results.model_name,
            scale=_scale(kind, [values]),
        )
        for kind in MAPS
        if (values := maps.values(kind)) is not None
    ]
    weakest = {k: (maps.bands.get(k) or {}).get("min") for k in MAPS}
    return {"fourier": maps, "charts": charts, "bands": band_rows(maps), "weakest": weakest}


# ---- compare page --------------------------------------------------------------------------


@dataclass(frozen=True)
class CompareRow:
    """One map kind across the compared entries: their maps on one scale, then each later
    entry minus the first (``differences``; empty when the grids differ)."""

    kind: str
    title: str
    panels: list[Markup]
    differences: list[Markup]


def compare_context(entries: Sequence[ResultsPublic]) -> dict[str, Any]:
    """Side-by-side maps of every compared entry that has them, and difference maps."""
    named = [(f"{e.model_name} (#{e.submission_id})", fourier_maps(e)) for e in entries]
    present = [(name, maps) for name, maps in named if maps is not None]
    if not present:
        return {}
    rows = [_compare_row(kind, present) for kind in MAPS]
    return {
        "rows": [row for row in rows if row is not None],
        "missing": [name for name, maps in named if maps is None],
        "labels": sorted({maps.label for _, maps in present}),
    }


def _compare_row(kind: str, present: list[tuple[str, FourierMaps]]) -> CompareRow | None:
    have = [(name, maps) for name, maps in present if maps.values(kind) is not None]
    if not have:
        return None
    arrays = [maps.values(kind) for _, maps in have]
    scale = _scale(kind, [a for a in arrays if a is not None])
    panels = [
        _map_chart(maps, kind, chart_id=f"compare-fourier-{kind}-{k}", name=name, scale=scale)
        for k, (name, maps) in enumerate(have)
    ]
    first_name, first = have[0]
    same_grid = [(n, m) for n, m in have[1:] if m.frequencies == first.frequencies]
    diffs = [(name, maps.values(kind) - first.values(kind)) for name, maps in same_grid]
    finite = [float(np.nanmax(np.abs(d))) for _, d in diffs if np.isfinite(d).any()]
    bound = max([*finite, 0.0]) or 1e-3
    what, label, percent = MAPS[kind]
    differences = [
        frequency_heatmap(
            diff,
            first.frequencies,
            chart_id=f"compare-fourier-{kind}-diff-{k}",
            title=f"{name} − {first_name}",
            value_label=f"Δ {label}",
            vmin=-bound,
            vmax=bound,
            center=0.0,
            size=first.size,
            percent=percent,
            description=(
                f"Difference of the {what} maps, {name} minus {first_name}: blue where "
                f"{name} is higher, red where it is lower."
            ),
        )
        for k, (name, diff) in enumerate(diffs, start=1)
    ]
    return CompareRow(kind, what, panels, differences)
