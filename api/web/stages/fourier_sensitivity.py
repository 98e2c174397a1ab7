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

from api.result_schemas import ResultsPublic
from api.web.frequency_heatmap import frequency_heatmap
from models.stages.fourier_sensitivity import BANDS, MERGED
from models.stages.fourier_text import band_edges, cost_text

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
    maps: FourierMaps,
    kind: str,
    *,
    chart_id: str,
    name: str,
    scale: tuple[float, float, float],
    tooltips: bool = True,
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
        tooltips=tooltips,
        description=(
            f"Fourier sensitivity heatmap of {name}: {what} under x + r·ε·U_ij, ε = "
            f"{maps.epsilon:g}, for each Fourier basis image U_ij, over {maps.images} images; "
            "centre = lowest frequency."
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
class CompareMaps:
    """The compared entries' maps of one kind (the smoothed ACR when every entry with a result
    has it, else the base accuracy) on one colour scale, then each later entry minus the first
    (``differences``; an entry on another grid gets none)."""

    kind: str
    title: str
    panels: list[Markup]
    differences: list[Markup]


def compare_context(entries: Sequence[ResultsPublic]) -> dict[str, Any]:
    """Side-by-side maps of every compared entry that has them, and difference maps. Cells carry
    no tooltips here (up to seven maps of 1,024 cells); the model pages have them."""
    named = [(f"{e.model_name} (#{e.submission_id})", fourier_maps(e)) for e in entries]
    present = [(name, maps) for name, maps in named if maps is not None]
    if not present:
        return {}
    kind = "acr" if all(maps.acr is not None for _, maps in present) else "base_accuracy"
    return {
        "maps": _compare_maps(kind, present),
        "missing": [name for name, maps in named if maps is None],
        "labels": sorted({maps.label for _, maps in present}),
    }


def _compare_maps(kind: str, present: list[tuple[str, FourierMaps]]) -> CompareMaps:
    arrays = [maps.values(kind) for _, maps in present]
    scale = _scale(kind, [a for a in arrays if a is not None])
    panels = [
        _map_chart(
            maps, kind, chart_id=f"compare-fourier-{k}", name=name, scale=scale, tooltips=False
        )
        for k, (name, maps) in enumerate(present)
    ]
    first_name, first = present[0]
    reference = first.values(kind)
    assert reference is not None
    diffs = []
    for name, maps in present[1:]:
        values = maps.values(kind)
        if values is not None and maps.frequencies == first.frequencies:
            diffs.append((name, values - reference))
    finite = [float(np.nanmax(np.abs(d))) for _, d in diffs if np.isfinite(d).any()]
    bound = max([*finite, 0.0]) or 1e-3
    what, label, percent = MAPS[kind]
    differences = [
        frequency_heatmap(
            diff,
            first.frequencies,
            chart_id=f"compare-fourier-diff-{k}",
            title=f"{name} − {first_name}",
            value_label=f"Δ {label}",
            vmin=-bound,
            vmax=bound,
            center=0.0,
            size=first.size,
            percent=percent,
            tooltips=False,
            description=(
                f"Difference of the {what} maps, {name} minus {first_name}: blue where "
                f"{name} is higher, red where it is lower."
            ),
        )
        for k, (name, diff) in enumerate(diffs, start=1)
    ]
    return CompareMaps(kind, what, panels, differences)
