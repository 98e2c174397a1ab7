"""The noise floor of a difference map: which cells of two runs' Fourier heatmaps differ by
more than run-to-run noise.

Heatmap signs come from each run's secret seed, so two runs of one model differ per cell by a
few hundredths (issue 26: sd 0.014, max 0.099 on the demo model) and a raw difference map shows
that noise as structure. Each cell is a mean over images, so each cell gets a test:

- **paired** (both runs measured the same images, which is the rule on one benchmark): exact
  McNemar per cell for an accuracy (the discordant images, two-sided binomial at ½), a paired
  t-test for a mean radius (ACR); the p-values are adjusted with Holm's step-down procedure
  over every tested cell, which controls the family-wise error: with probability at least
  1 − ``level`` not one cell of two runs of the same model is marked significant;
- **unpaired** (other images, or per-image records missing): each cell's accuracy gets its
  Clopper–Pearson interval at level ``level / (2 m)`` for m cells (Bonferroni); a cell is
  significant when the two intervals are disjoint. Under equal true accuracies either interval
  must miss the truth for that, so the family-wise error is at most ``level`` again.

The *noise floor* stated in the caption is the typical size of a difference that reaches
significance: the Bonferroni critical value times the median standard error of a cell's
difference (paired), or the median sum of the two intervals' half-widths (unpaired).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVEL = 0.05
"""Family-wise error level over the cells of one map."""


@dataclass(frozen=True)
class CellTests:
    """Per-cell tests of one difference map (K × K grids; NaN / False where not tested)."""

    significant: np.ndarray
    p_adjusted: np.ndarray | None
    cells: int
    level: float
    floor: float
    paired: bool
    method: str

    @property
    def marked(self) -> int:
        return int(self.significant.sum())

    def sentence(self) -> str:
        """The caption's statement of the test, its multiplicity control and the noise floor."""
        return (
            f"Cells washed out are within the noise floor: {self.method}; family-wise error "
            f"{self.level:.0%} over the {self.cells:,} cells. Noise floor ≈ ±{self.floor:.3g} "
            f"(a difference about this large is needed to count); {self.marked:,} of "
            f"{self.cells:,} cells differ significantly."
        )


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of the finite entries (NaN stays NaN)."""
    flat = np.asarray(p_values, dtype=float).ravel()
    finite = np.flatnonzero(np.isfinite(flat))
    out = np.full(flat.shape, np.nan)
    if finite.size:
        order = finite[np.argsort(flat[finite], kind="stable")]
        m = order.size
        scaled = flat[order] * (m - np.arange(m))
        out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out.reshape(np.shape(p_values))


def _critical(level: float, cells: int) -> float:
    from scipy import stats  # on first use: importing the figures stays light

    return float(stats.norm.isf(level / (2 * max(cells, 1))))


def paired_cell_tests(
    a: np.ndarray, b: np.ndarray, *, binary: bool, level: float = LEVEL
) -> CellTests:
    """Tests of ``a − b`` per cell from per-image values on the same images, shaped
    (K, K, images) (NaN: a cell not computed). ``binary``: 0/1 correctness (exact McNemar),
    else a mean of per-image radii (paired t-test). Raises ValueError for mismatched shapes."""
    from scipy import stats  # on first use: importing the figures stays light

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(
            f"paired cell tests need two (K, K, images) arrays, got {a.shape}, {b.shape}"
        )
    n = a.shape[2]
    tested = np.isfinite(a).all(axis=2) & np.isfinite(b).all(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        if binary:
            only_a = np.nansum((a == 1) & (b == 0), axis=2)
            only_b = np.nansum((a == 0) & (b == 1), axis=2)
            discordant = only_a + only_b
            p = np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(only_a, only_b), discordant, 0.5))
            p = np.where(discordant == 0, 1.0, p)
            se = np.sqrt(np.maximum(discordant - (only_a - only_b) ** 2 / n, 0.0)) / n
            method = f"exact McNemar per cell, paired over the {n:,} images both runs share"
        else:
            d = a - b
            mean, sd = d.mean(axis=2), d.std(axis=2, ddof=1)
            se = sd / math.sqrt(n)
            t = np.where(se > 0, mean / se, np.where(mean == 0, 0.0, np.inf))
            p = 2 * stats.t.sf(np.abs(t), df=max(n - 1, 1))
            method = f"paired t-test per cell over the {n:,} images both runs share"
    p = np.where(tested, p, np.nan)
    adjusted = holm(p)
    cells = int(tested.sum())
    floor = _critical(level, cells) * float(np.median(se[tested])) if cells else math.nan
    return CellTests(
        significant=np.nan_to_num(adjusted, nan=1.0) <= level,
        p_adjusted=adjusted,
        cells=cells,
        level=level,
        floor=floor,
        paired=True,
        method=method + " (Holm-adjusted)",
    )


def unpaired_cell_tests(
    accuracy_a: np.ndarray,
    images_a: int,
    accuracy_b: np.ndarray,
    images_b: int,
    *,
    level: float = LEVEL,
) -> CellTests:
    """Tests of two accuracy maps measured on different images (or without per-image records):
    a cell differs when its two Clopper–Pearson intervals at level ``level / (2 m)`` are
    disjoint (m tested cells, Bonferroni). Raises ValueError for mismatched shapes or no
    images."""
    from scipy import stats  # on first use: importing the figures stays light

    pa_, pb_ = np.asarray(accuracy_a, dtype=float), np.asarray(accuracy_b, dtype=float)
    if pa_.shape != pb_.shape or images_a < 1 or images_b < 1:
        raise ValueError(
            f"unpaired cell tests need maps of one shape and images ≥ 1, got {pa_.shape}, "
            f"{pb_.shape}, {images_a}, {images_b}"
        )
    tested = np.isfinite(pa_) & np.isfinite(pb_)
    cells = int(tested.sum())
    alpha = level / (2 * max(cells, 1))
    bounds = []
    for p, n in ((pa_, images_a), (pb_, images_b)):
        k = np.round(np.nan_to_num(p) * n)
        low = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        high = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
        bounds.append((low, high))
    (low_a, high_a), (low_b, high_b) = bounds
    disjoint = (low_a > high_b) | (low_b > high_a)
    half = (high_a - low_a + high_b - low_b) / 2
    return CellTests(
        significant=disjoint & tested,
        p_adjusted=None,
        cells=cells,
        level=level,
        floor=float(np.median(half[tested])) if cells else math.nan,
        paired=False,
        method=(
            f"the two cells' Clopper–Pearson intervals ({images_a:,} and {images_b:,} images, "
            "not shared) at the Bonferroni level are disjoint"
        ),
    )


def cell_outcomes(
    u: np.ndarray,
    v: np.ndarray,
    index: np.ndarray,
    values: np.ndarray,
    frequencies: np.ndarray,
    size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-image values on the heatmap grid from the records' columns (point ``(u, v)``, image
    ``index``, value), each point written to its cell and its mirror's, as
    ``certbench.fourier.assemble_heatmap`` does: ((K, K, images) with NaN where a cell or
    image is missing, the sorted image indices)."""
    freqs = np.asarray(frequencies, dtype=int)
    pos = np.full(size + 1, -1)
    pos[freqs + size // 2] = np.arange(len(freqs))
    images, column = np.unique(np.asarray(index), return_inverse=True)
    out = np.full((len(freqs), len(freqs), len(images)), np.nan)
    u, v = np.asarray(u, dtype=int), np.asarray(v, dtype=int)
    half = size // 2
    for i, j in ((u, v), ((-u + half) % size - half, (-v + half) % size - half)):
        out[pos[i + half], pos[j + half], column] = values
    return out, images
