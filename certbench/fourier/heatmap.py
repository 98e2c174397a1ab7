"""Fourier-sensitivity heatmaps from records: mirror fill, per-cell means, band summary.

:func:`assemble_heatmap` writes each record's point to its cell and to its mirror's
(U_{−i,−j} = U_{i,j}, ``certbench.fourier.basis``), so records certified once per distinct
basis image fill the whole grid; shards merge by concatenating their records. Cells average over
images: the smoothed classifier's ACR (radius if correct, else 0) and certified accuracy at
radius 0, and the base classifier's accuracy. :func:`summarize_heatmap` averages cells by radial
band with the project's band edges (``certbench.fourier.spectral.BAND_EDGES``, the ones the
corruption sets use): the low/mid/high figures of the leaderboard.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from certbench.errors import SensitivityError
from certbench.fourier.basis import Point, canonical, grid_offsets, mirror
from certbench.fourier.sensitivity import SensitivityRecord
from certbench.fourier.spectral import BANDS, frequency_band


@dataclass(frozen=True)
class Heatmap:
    """Cells of the strided centred grid, mirror-filled; NaN where no record exists.

    ``frequencies`` (K,) are the grid offsets in cycles per image on both axes (rows: i,
    columns: j, ascending, DC at ``frequencies == 0``). ``acr`` and ``accuracy`` (the smoothed
    classifier's certified accuracy at radius 0) are None for a base-only run.
    """

    size: int
    frequencies: np.ndarray
    base_accuracy: np.ndarray
    acr: np.ndarray | None
    accuracy: np.ndarray | None
    images: np.ndarray

    def radial_frequency(self) -> np.ndarray:
        """sqrt(i² + j²) of every cell, (K, K)."""
        f = self.frequencies.astype(np.float64)
        return np.hypot(f[:, None], f[None, :])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as null) arrays, for summaries and the REST API."""

        def grid(a: np.ndarray | None) -> list[list[float | None]] | None:
            if a is None:
                return None
            return [[None if math.isnan(x) else float(x) for x in row] for row in a]

        return {
            "size": self.size,
            "frequencies": [int(f) for f in self.frequencies],
            "base_accuracy": grid(self.base_accuracy),
            "acr": grid(self.acr),
            "accuracy": grid(self.accuracy),
            "images": self.images.astype(int).tolist(),
        }


def assemble_heatmap(
    records: Sequence[SensitivityRecord], *, size: int = 32, stride: int = 1
) -> Heatmap:
    """Per-cell means of the records, each point written to its cell and its mirror's.

    Raises SensitivityError for a record off the strided grid or a (point, image) seen twice
    (overlapping shards), and when smoothed and base-only records are mixed.
    """
    freqs = grid_offsets(size, stride)
    pos = {int(f): k for k, f in enumerate(freqs)}
    shape = (len(freqs), len(freqs))
    sums = {name: np.zeros(shape) for name in ("base", "acr", "accuracy")}
    counts = np.zeros(shape, dtype=np.int64)
    smoothed = {r.certified is not None for r in records}
    if len(smoothed) > 1:
        raise SensitivityError("records mix smoothed and base-only runs; assemble them apart")
    seen: set[tuple[Point, int]] = set()
    for r in records:
        key = (canonical(r.point, size), r.index)
        if key in seen:
            raise SensitivityError(
                f"image {r.index} at grid point {r.point} appears twice; shards overlap"
            )
        seen.add(key)
        cells = {r.point, mirror(r.point, size)}
        if any(c[0] not in pos or c[1] not in pos for c in cells):
            raise SensitivityError(
                f"record at grid point {r.point} is not on the stride-{stride} grid; pass the "
                "stride of the protocol that produced the records"
            )
        c = r.certified
        for i, j in cells:
            a, b = pos[i], pos[j]
            counts[a, b] += 1
            sums["base"][a, b] += r.base_correct
            if c is not None:
                sums["acr"][a, b] += c.radius if c.correct else 0.0
                sums["accuracy"][a, b] += c.correct
    with np.errstate(invalid="ignore", divide="ignore"):
        means = {name: np.where(counts > 0, s / counts, np.nan) for name, s in sums.items()}
    has_smoothed = smoothed == {True}
    return Heatmap(
        size=size,
        frequencies=freqs,
        base_accuracy=means["base"],
        acr=means["acr"] if has_smoothed else None,
        accuracy=means["accuracy"] if has_smoothed else None,
        images=counts,
    )


def band_means(heatmap: Heatmap, values: np.ndarray) -> dict[str, float | None]:
    """Mean over the computed cells of each radial band (low/mid/high) and over all cells."""
    bands = np.vectorize(lambda f: frequency_band(float(f), size=heatmap.size))(
        heatmap.radial_frequency()
    )
    done = ~np.isnan(values)
    out: dict[str, float | None] = {}
    for band in BANDS:
        cells = done & (bands == band)
        out[band] = float(values[cells].mean()) if cells.any() else None
    out["all"] = float(values[done].mean()) if done.any() else None
    return out


def summarize_heatmap(heatmap: Heatmap) -> dict[str, Any]:
    """Band means, the weakest cell, and counts: the figures the leaderboard shows."""
    summary: dict[str, Any] = {
        "cells": int((heatmap.images > 0).sum()),
        "grid_cells": int(heatmap.images.size),
    }
    maps = {"base_accuracy": heatmap.base_accuracy, "acr": heatmap.acr}
    for name, values in maps.items():
        if values is None:
            summary[name] = None
            continue
        entry: dict[str, Any] = {"bands": band_means(heatmap, values)}
        if not np.isnan(values).all():
            a, b = np.unravel_index(np.nanargmin(values), values.shape)
            i, j = int(heatmap.frequencies[a]), int(heatmap.frequencies[b])
            entry["min"] = {"value": float(values[a, b]), "point": [i, j]}
        summary[name] = entry
    return summary
