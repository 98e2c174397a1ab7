"""Intervals on every figure of a leaderboard entry, and paired tests from compact per-image terms.

An entry's figures are means over its test sets of per-set figures (the mACR of Sun et al.,
ECCV 2022; certified accuracy, clean accuracy, abstain rate and the p̂_A quantiles of Sun et al.,
ICML 2025, likewise). Their 95 % intervals over the sampled images follow
``certbench.stats.intervals``:

- one test set: Clopper-Pearson for the proportions (certified accuracy at each radius, clean
  accuracy, abstain rate), percentile bootstrap over images for ACR and the p̂_A quantiles;
- several test sets: percentile bootstrap over *source images* (the sets corrupt the same
  images, so they are resampled jointly: a cluster bootstrap; sets that do not share their image
  indices are resampled independently, stratified), for means and quantiles alike;
- named groups of sets (spectral bands): the same bootstrap over the group's sets.

A leaderboard compares many entries pairwise, and reading every test set's records of 50 entries
for one page is slow (192 files each for CIFAR-F). When the sets share their images, the paired
bootstrap of a mean over sets only needs each entry's per-image mean over sets of the figure's
term (``image_terms``, a few arrays of one value per image): the difference of two entries'
per-image means is the per-image mean of the per-set differences that
``certbench.stats.intervals.compare_acr`` resamples, with the same draws, so ``compare_terms`` gives
its numbers (up to floating-point summation order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.smoothing import PA_QUANTILES, RADII, Records
from certbench.stats.image_arrays import SetArrays, set_arrays
from certbench.stats.intervals import (
    BOOTSTRAP_SEED,
    LEVEL,
    RESAMPLES,
    Interval,
    PairedTest,
    benchmark_replicates,
    bootstrap_p_value,
    clopper_pearson,
    pa_band,
    percentile_bounds,
)

PA_QUANTILES_FIGURE = "the p_A quantiles"


@dataclass(frozen=True)
class FigureIntervals:
    """95 % intervals of an entry's (or one test set's) figures; ``groups`` holds the mean ACR
    of each named group of test sets (spectral bands)."""

    acr: Interval
    certified_accuracy: dict[float, Interval]
    clean_accuracy: Interval
    abstain_rate: Interval
    pa_quantiles: dict[float, Interval]
    groups: dict[str, Interval] = field(default_factory=dict)
    pa_band_half_width: float | None = None
    """Half-width of the simultaneous band on the p_A curve (one test set only)."""

    def to_dict(self) -> dict[str, object]:
        """JSON form: every interval as ``{estimate, ci_low, ci_high, level, method}``."""
        out: dict[str, object] = {
            "acr": self.acr.to_dict(),
            "certified_accuracy": {
                f"{r:g}": i.to_dict() for r, i in self.certified_accuracy.items()
            },
            "clean_accuracy": self.clean_accuracy.to_dict(),
            "abstain_rate": self.abstain_rate.to_dict(),
            "pa_quantiles": {f"{q:g}": i.to_dict() for q, i in self.pa_quantiles.items()},
        }
        if self.groups:
            out["groups"] = {name: i.to_dict() for name, i in self.groups.items()}
        if self.pa_band_half_width is not None:
            out["pa_band_half_width"] = self.pa_band_half_width
        return out


def _shared(arrays: Sequence[SetArrays]) -> bool:
    return all(np.array_equal(a.index, arrays[0].index) for a in arrays)


def _mean_interval(
    terms: list[np.ndarray], shared: bool, level: float, resamples: int, seed: int
) -> Interval:
    """Mean over sets of per-set means, with the (cluster or stratified) bootstrap."""
    estimate, replicates, method = benchmark_replicates(terms, shared, resamples, seed)
    low, high = percentile_bounds(replicates, level)
    if len(terms) == 1:
        method = "bootstrap"
    return Interval(estimate, float(low), float(high), level, method)


def _proportion_interval(
    terms: list[np.ndarray], shared: bool, level: float, resamples: int, seed: int
) -> Interval:
    """A proportion: exact Clopper-Pearson for one set, the bootstrap of the mean otherwise."""
    if len(terms) > 1:
        return _mean_interval(terms, shared, level, resamples, seed)
    values = terms[0]
    low, high = clopper_pearson(int(values.sum()), len(values), level)
    return Interval(float(values.mean()), float(low), float(high), level, "clopper-pearson")


def _quantile_intervals(
    arrays: Sequence[SetArrays],
    qs: Sequence[float],
    shared: bool,
    level: float,
    resamples: int,
    seed: int,
) -> dict[float, Interval]:
    """Mean over sets of each p̂_A quantile, bootstrapping images (jointly when shared)."""
    rng = np.random.default_rng(seed)
    n = len(arrays[0].index)
    common = rng.integers(0, n, size=(resamples, n)) if shared else None
    totals = np.zeros((len(qs), resamples))
    for arr in arrays:
        draws = (
            common
            if common is not None
            else rng.integers(0, len(arr.index), (resamples, len(arr.index)))
        )
        totals += np.quantile(arr.need("pa_hat", PA_QUANTILES_FIGURE)[draws], qs, axis=1)
    replicates = totals / len(arrays)
    low, high = percentile_bounds(replicates, level)
    estimates = np.mean(
        [np.quantile(a.need("pa_hat", PA_QUANTILES_FIGURE), qs) for a in arrays], axis=0
    )
    method = (
        "bootstrap"
        if len(arrays) == 1
        else ("cluster bootstrap" if shared else "stratified bootstrap")
    )
    return {
        float(q): Interval(float(e), float(lo), float(hi), level, method)
        for q, e, lo, hi in zip(qs, estimates, low, high, strict=True)
    }


def figure_intervals(
    sets: Mapping[str, Records],
    *,
    groups: Mapping[str, Sequence[str]] | None = None,
    radii: Sequence[float] = RADII,
    quantiles: Sequence[float] = PA_QUANTILES,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> FigureIntervals:
    """Intervals of every figure of an entry whose test sets' records are ``sets``.

    ``groups`` (e.g. spectral bands → test-set names) adds the interval of each group's mean
    ACR; a group without any of the sets is skipped. Raises RecordsError for no sets.
    """
    if not sets:
        raise RecordsError("intervals need the records of at least one test set")
    names = sorted(sets)
    arrays = [set_arrays(sets[name]) for name in names]
    shared = _shared(arrays)
    args = (shared, level, resamples, seed)
    out_groups = {}
    for group, members in (groups or {}).items():
        chosen = [a for name, a in zip(names, arrays, strict=True) if name in set(members)]
        if chosen:
            out_groups[group] = _mean_interval(
                [a.score for a in chosen], _shared(chosen), level, resamples, seed
            )
    return FigureIntervals(
        acr=_mean_interval([a.score for a in arrays], *args),
        certified_accuracy={
            float(r): _proportion_interval([a.certified(r) for a in arrays], *args) for r in radii
        },
        clean_accuracy=_proportion_interval(
            [a.need("correct", "clean accuracy").astype(float) for a in arrays], *args
        ),
        abstain_rate=_proportion_interval(
            [a.need("abstain", "the abstain rate").astype(float) for a in arrays], *args
        ),
        pa_quantiles=_quantile_intervals(arrays, quantiles, *args),
        groups=out_groups,
        pa_band_half_width=pa_band(sets[names[0]], level=level).half_width
        if len(arrays) == 1
        else None,
    )


# --------------------------------------------------------------------------- p_A band


def mean_pa_band(counts: Sequence[int], level: float = LEVEL) -> tuple[float, str]:
    """(half-width, method) of a simultaneous band around the p_A curve of an entry, i.e. the
    complementary ECDF of Sun et al., ICML 2025, averaged over its test sets of ``counts`` images
    each.

    One test set: the exact Kolmogorov quantile (``certbench.stats.intervals.pa_band``). Several
    test sets: each set's Kolmogorov band at level 1 − (1 − level)/S (Bonferroni over the S sets);
    with probability ≥ level all of them hold at once, and then the mean curve lies within the
    mean of their half-widths of the mean true curve at every x. Valid whatever the dependence
    between the sets (they corrupt the same source images), conservative because it ignores the
    averaging. Each set's own band (at level) is its ``pa_band_half_width``.
    """
    from scipy.stats import kstwo

    if not counts or min(counts) < 1:
        raise RecordsError(f"a p_A band needs at least one image per test set, got {counts}")
    if not 0 < level < 1:
        raise RecordsError(f"level must lie in (0, 1), got {level}; e.g. 0.95")
    if len(counts) == 1:
        return float(kstwo.ppf(level, counts[0])), "kolmogorov"
    per_set = 1 - (1 - level) / len(counts)
    sizes, repeats = np.unique(np.asarray(counts), return_counts=True)
    widths = np.array([kstwo.ppf(per_set, int(n)) for n in sizes])
    return float((widths * repeats).sum() / repeats.sum()), "kolmogorov, bonferroni over test sets"


# --------------------------------------------------------------------------- paired terms


@dataclass(frozen=True)
class ImageTerms:
    """Per-image means over an entry's test sets of each figure's per-image term.

    ``terms["acr"]`` (radius·1[correct]), ``terms["certified@<r>"]`` (1[correct ∧ radius ≥ r]),
    ``terms["clean"]`` (1[correct]: clean accuracy of the smoothed classifier), ``terms["abstain"]``
    (1[abstained]) and ``terms["acr:<group>"]`` (ACR terms over the sets of one group), one value
    per image of ``index``; ``sets`` is how many test sets were averaged.
    """

    index: np.ndarray
    terms: dict[str, np.ndarray]
    sets: int

    def to_table(self) -> pa.Table:
        return pa.table({"index": self.index, **self.terms})

    @classmethod
    def from_table(cls, table: pa.Table, sets: int) -> ImageTerms:
        columns = {n: table.column(n).to_numpy() for n in table.column_names if n != "index"}
        return cls(table.column("index").to_numpy(), columns, sets)


def certified_key(radius: float) -> str:
    return f"certified@{radius:g}"


def image_terms(
    sets: Mapping[str, Records],
    *,
    groups: Mapping[str, Sequence[str]] | None = None,
    radii: Sequence[float] = RADII,
) -> ImageTerms:
    """An entry's per-image means over its test sets (see ``ImageTerms``).

    Raises RecordsError when the sets do not share their image indices (a paired test then
    needs the full records).
    """
    if not sets:
        raise RecordsError("image terms need the records of at least one test set")
    names = sorted(sets)
    arrays = [set_arrays(sets[name]) for name in names]
    if not _shared(arrays):
        raise RecordsError("the test sets do not share their images; compare the full records")
    terms = {
        "acr": np.mean([a.score for a in arrays], axis=0),
        "clean": np.mean([a.need("correct", "clean accuracy") for a in arrays], axis=0),
        "abstain": np.mean([a.need("abstain", "the abstain rate") for a in arrays], axis=0),
    }
    for r in radii:
        terms[certified_key(r)] = np.mean([a.certified(r) for a in arrays], axis=0)
    for group, members in (groups or {}).items():
        chosen = [a.score for name, a in zip(names, arrays, strict=True) if name in set(members)]
        if chosen:
            terms[f"acr:{group}"] = np.mean(chosen, axis=0)
    return ImageTerms(arrays[0].index, terms, len(arrays))


def compare_terms(
    a: ImageTerms,
    b: ImageTerms,
    key: str,
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> PairedTest:
    """Paired bootstrap test of A − B on the mean figure ``key`` (e.g. ``acr``,
    ``certified@0.5``), resampling the shared images. Raises RecordsError when the entries were
    certified on other images or lack the figure."""
    if not np.array_equal(a.index, b.index):
        raise RecordsError(
            "the entries were certified on different images; a paired test needs "
            "the same image indices in both"
        )
    if key not in a.terms or key not in b.terms:
        raise RecordsError(f"figure {key!r} is not among the terms {sorted(a.terms)}")
    difference = a.terms[key] - b.terms[key]
    estimate, replicates, method = benchmark_replicates([difference], True, resamples, seed)
    method = f"paired {'cluster bootstrap' if a.sets > 1 else 'bootstrap'}"
    low, high = percentile_bounds(replicates, level)
    return PairedTest(
        metric=key,
        estimate_a=float(a.terms[key].mean()),
        estimate_b=float(b.terms[key].mean()),
        difference=Interval(estimate, float(low), float(high), level, method),
        p_value=float(bootstrap_p_value(estimate, replicates)),
        method=method,
    )
