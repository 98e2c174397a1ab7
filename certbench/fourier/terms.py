"""Per-image terms of the Fourier sensitivity stage's figures (``certbench.stats.terms``).

The mean of a heatmap band's cells (Sun et al., ECCV 2022, §2.2) is the mean over images of
each image's mean over those cells, when every cell holds every image (the stage checks it), with
each record written to its cell and its mirror's as ``certbench.fourier.heatmap.assemble_heatmap``
does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from certbench.errors import RecordsError
from certbench.fourier.basis import mirror
from certbench.fourier.sensitivity import SensitivityRecord
from certbench.fourier.spectral import frequency_band
from certbench.stats import FigureTerms, Kind, figure_terms

SENSITIVITY_BANDS = ("low", "mid", "high", "all")


def sensitivity_terms(records: Sequence[SensitivityRecord], *, size: int) -> dict[str, FigureTerms]:
    """``acr:<band>`` (smoothed runs) and ``base_accuracy:<band>`` for the radial bands low,
    mid, high and all: each image's mean over the band's cells of its ACR term (radius if
    correct, else 0) or its base-classifier correctness. Raises RecordsError when an image lacks
    a cell another image has (the band mean then weighs images unequally)."""
    if not records:
        raise RecordsError("no Fourier-sensitivity records: compute at least one grid point")
    smoothed = records[0].certified is not None
    sums: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    cells: dict[str, set[tuple[int, int]]] = defaultdict(set)
    band_of: dict[tuple[int, int], str] = {}
    for r in records:
        for cell in {r.point, mirror(r.point, size)}:
            if cell not in band_of:
                band_of[cell] = frequency_band(float(np.hypot(*cell)), size=size)
            for band in (band_of[cell], "all"):
                cells[band].add(cell)
                counts[band][r.index] += 1
                sums[("base_accuracy", band)][r.index] += float(r.base_correct)
                if smoothed and r.certified is not None:
                    c = r.certified
                    sums[("acr", band)][r.index] += c.radius if c.correct else 0.0
    out: dict[str, FigureTerms] = {}
    for (name, band), by_image in sums.items():
        per_image = counts[band]
        if set(per_image.values()) != {len(cells[band])}:
            raise RecordsError(
                f"band {band!r}: images hold {sorted(set(per_image.values()))} of its "
                f"{len(cells[band])} cells; merge every shard of every grid point first"
            )
        index = np.fromiter(by_image, dtype=np.int64)
        values = np.array([by_image[i] / per_image[i] for i in index])
        kind: Kind = "proportion" if name == "base_accuracy" else "mean"
        out[f"{name}:{band}"] = figure_terms(index, values, kind, sets=len(cells[band]))
    return out
