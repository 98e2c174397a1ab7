"""Web sections of the Fourier sensitivity stage: the heatmaps on the model page (smoothed ACR and
base accuracy, band means, protocol and cost) and, on the compare page, the entries' maps side by
side on one colour scale with each entry's difference to the first.

The data is the stage's stored summary (``models.stages.fourier_sensitivity.stage``), the same JSON
``/api/v1/results/{id}`` serves in its ``stages`` list; maps are drawn by
``certbench.figures.frequency_heatmap``, difference maps with their noise floor
(``certbench.figures.difference``, from the entries' per-image records).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from api.schemas.result import ResultsPublic
from certbench.figures import (
    CellTests,
    Figure,
    cell_outcomes,
    frequency_heatmap,
    paired_cell_tests,
    unpaired_cell_tests,
)
from certbench.fourier import SIGN_NAMES, SIGN_TEXT
from models.stages.fourier_sensitivity.figures import BANDS
from models.stages.fourier_sensitivity.stage import MERGED
from models.stages.fourier_sensitivity.text import band_edges, cost_text

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
    signs: str = "independent"
    """``channel_signs`` of the stored protocol (rows from before the field: per channel)."""

    @property
    def signs_name(self) -> str:
        return SIGN_NAMES.get(self.signs, self.signs)  # type: ignore[call-overload]

    @property
    def signs_text(self) -> str:
        return SIGN_TEXT.get(self.signs, self.signs)  # type: ignore[call-overload]

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
        signs=str(protocol.get("channel_signs", "independent")),
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
    side: int = 300,
) -> Figure:
    what, label, percent = MAPS[kind]
    values = maps.values(kind)
    assert values is not None
    low, centre, high = scale
    description = (
        f"Fourier sensitivity heatmap of {name}: {what} under x + r·ε·U_ij, ε = "
        f"{maps.epsilon:g}, for each Fourier basis image U_ij, over {maps.images} images; "
        "centre = lowest frequency."
    )
    spec = frequency_heatmap(
        values,
        maps.frequencies,
        title=f"{name}: {what}",
        value_label=label,
        vmin=low,
        vmax=high,
        center=centre,
        size=maps.size,
        percent=percent,
        description=description,
        side=side,
    )
    return Figure(chart_id, spec, description)


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

RecordsOf = Callable[[int, str], Path | None]
"""(submission id, stage) → the stage's merged per-image records on this server, or None."""


@dataclass(frozen=True)
class CompareMaps:
    """The compared entries' maps of one kind (the smoothed ACR when every entry with a result
    has it, else the base accuracy) on one colour scale, then each later entry minus the first
    (``differences``, with their noise floors in ``tests``; an entry on another grid gets
    none)."""

    kind: str
    title: str
    panels: list[Figure]
    differences: list[Figure]
    tests: list[CellTests | None]


def compare_context(
    entries: Sequence[ResultsPublic], records_of: RecordsOf | None = None
) -> dict[str, Any]:
    """Side-by-side maps of every compared entry that has them, and difference maps whose
    cells within the noise floor are washed out (``certbench.figures.difference``)."""
    named = [(e, f"{e.model_name} (#{e.submission_id})", fourier_maps(e)) for e in entries]
    present = [(e, name, maps) for e, name, maps in named if maps is not None]
    if not present:
        return {}
    kind = "acr" if all(maps.acr is not None for _, _, maps in present) else "base_accuracy"
    return {
        "maps": _compare_maps(kind, present, records_of),
        "missing": [name for _, name, maps in named if maps is None],
        "labels": sorted({maps.label for _, _, maps in present}),
        "signs": sorted({maps.signs_name for _, _, maps in present}),
    }


@lru_cache(maxsize=64)
def _outcomes(
    path: str, mtime_ns: int, kind: str, size: int, freqs: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Per-image values of a records file on the heatmap grid (cached per file version)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["u", "v", "index", "base_correct", "radius", "correct"])
    column = lambda name: table.column(name).to_numpy(zero_copy_only=False)  # noqa: E731
    if kind == "acr":
        values = np.nan_to_num(column("radius").astype(float)) * column("correct").astype(bool)
    else:
        values = column("base_correct").astype(float)
    return cell_outcomes(column("u"), column("v"), column("index"), values, np.array(freqs), size)


def _paired(
    path: Path | None, kind: str, maps: FourierMaps
) -> tuple[np.ndarray, np.ndarray] | None:
    if path is None:
        return None
    freqs = tuple(maps.frequencies)
    return _outcomes(str(path), path.stat().st_mtime_ns, kind, maps.size, freqs)


def cell_tests(
    kind: str,
    first: tuple[ResultsPublic, FourierMaps],
    other: tuple[ResultsPublic, FourierMaps],
    records_of: RecordsOf | None,
) -> CellTests | None:
    """Which cells of ``other − first`` differ beyond run-to-run noise: paired over the images
    both runs share when both records are here, else from the cells' binomial intervals (an
    accuracy map only; None for an ACR map without records)."""
    (entry_a, maps_a), (entry_b, maps_b) = first, other
    if records_of is not None:
        a = _paired(records_of(entry_a.submission_id, STAGE), kind, maps_a)
        b = _paired(records_of(entry_b.submission_id, STAGE), kind, maps_b)
        if a is not None and b is not None:
            shared, in_a, in_b = np.intersect1d(a[1], b[1], return_indices=True)
            if shared.size >= 2:
                return paired_cell_tests(
                    b[0][:, :, in_b], a[0][:, :, in_a], binary=kind == "base_accuracy"
                )
    if kind == "base_accuracy":
        return unpaired_cell_tests(
            maps_b.base_accuracy, maps_b.images, maps_a.base_accuracy, maps_a.images
        )
    return None


def _compare_maps(
    kind: str,
    present: list[tuple[ResultsPublic, str, FourierMaps]],
    records_of: RecordsOf | None,
) -> CompareMaps:
    arrays = [maps.values(kind) for _, _, maps in present]
    scale = _scale(kind, [a for a in arrays if a is not None])
    panels = [
        _map_chart(maps, kind, chart_id=f"compare-fourier-{k}", name=name, scale=scale, side=260)
        for k, (_, name, maps) in enumerate(present)
    ]
    first_entry, first_name, first = present[0]
    reference = first.values(kind)
    assert reference is not None
    what, label, percent = MAPS[kind]
    differences, tests = [], []
    for k, (entry, name, maps) in enumerate(present[1:], start=1):
        values = maps.values(kind)
        if values is None or maps.frequencies != first.frequencies:
            continue
        diff = values - reference
        finite = np.abs(diff[np.isfinite(diff)])
        bound = float(finite.max()) if finite.size and finite.max() > 0 else 1e-3
        test = cell_tests(kind, (first_entry, first), (entry, maps), records_of)
        description = (
            f"Difference of the {what} maps, {name} minus {first_name}: blue where {name} is "
            "higher, red where it is lower."
            + (f" {test.sentence()}" if test else " No noise floor: per-image records missing.")
        )
        spec = frequency_heatmap(
            diff,
            first.frequencies,
            title=f"{name} − {first_name}",
            value_label=f"Δ {label}",
            vmin=-bound,
            vmax=bound,
            center=0.0,
            size=first.size,
            percent=percent,
            description=description,
            significant=test.significant if test else None,
            p_values=test.p_adjusted if test else None,
            side=260,
        )
        differences.append(Figure(f"compare-fourier-diff-{k}", spec, description))
        tests.append(test)
    return CompareMaps(kind, what, panels, differences, tests)
