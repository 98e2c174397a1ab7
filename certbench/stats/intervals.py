"""Uncertainty of leaderboard figures over the sampled test images, from per-image records only.

A test set of the protocol holds 500 images (every 20th of 10,000); the figures estimate what
the certification procedure would score on the image distribution, and these intervals cover
that sampling error at level 95 % (Sun et al., ICML 2025 show ACR is fragile; no interval needs
the model):

- certified accuracy at a radius, one test set: exact two-sided Clopper-Pearson interval of a
  binomial proportion (conservative: coverage ≥ level for every true value);
- ACR of one test set: percentile bootstrap over images (1,000 resamples, fixed seed);
- mACR (mean ACR over test sets) and mean certified accuracy: bootstrap over *source images*.
  The issue asked for resampling stratified by test set, which treats the sets as independent
  samples; but every test set of a benchmark corrupts the same source images (record ``index``
  = position in the source test split), so their errors are positively correlated and the
  stratified interval is too narrow (simulated coverage 0.59 instead of 0.95 for 8 such sets
  of 500 images, ``benchmarks/interval_coverage.py``). Resampling image indices jointly across
  sets (a cluster bootstrap) is the bootstrap of the mean over images of each image's mean over
  sets. Sets that do not share their image indices fall back to the stratified bootstrap
  (``method`` says so);
- p_A complementary ECDF: simultaneous band curve ± ε, ε the exact two-sided Kolmogorov
  quantile (scipy.stats.kstwo; at most the DKW-Massart ε = sqrt(ln(2/(1−level))/(2n)));
- paired comparison of two entries on the same images: bootstrap test on the ACR/mACR
  difference (the same resampled images for both entries; p-value from the centred bootstrap
  distribution, Hall & Wilson 1991), and exact McNemar (binomial test on the discordant images)
  for certified accuracy at a radius of one test set.

The Monte Carlo error of each image's own figures (n = 100,000 noise samples) is not included:
it is part of the certification procedure whose expected score the intervals cover.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from scipy.special import bdtr, betaincinv, ndtri

from certbench.errors import RecordsError
from certbench.smoothing import PA_GRID, RADII, Records
from certbench.stats.image_arrays import SetArrays, set_arrays

LEVEL = 0.95
RESAMPLES = 1000
BOOTSTRAP_SEED = 0
"""Fixed: intervals are a function of the records alone (recomputing gives the same numbers)."""
ALPHA_TIE = 0.05
_MAX_DRAWS = 1 << 22
"""Bootstrap index draws per chunk (16 MiB of int32): bounds memory for any batch of rows."""

Benchmark: TypeAlias = Mapping[str, Records]


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided interval at `level`."""

    estimate: float
    low: float
    high: float
    level: float
    method: str

    def to_dict(self) -> dict[str, float | str]:
        """JSON form with the service's field names (``ci_low``/``ci_high``)."""
        return {
            "estimate": self.estimate,
            "ci_low": self.low,
            "ci_high": self.high,
            "level": self.level,
            "method": self.method,
        }


@dataclass(frozen=True)
class Band:
    """Simultaneous band around a curve: every point is covered at once with prob. ≥ level."""

    grid: np.ndarray
    curve: np.ndarray
    low: np.ndarray
    high: np.ndarray
    half_width: float
    level: float
    method: str


@dataclass(frozen=True)
class PairedTest:
    """Entry A against entry B on the same images: difference A − B, its interval, p-value."""

    metric: str
    estimate_a: float
    estimate_b: float
    difference: Interval
    p_value: float
    method: str

    def significant(self, alpha: float = ALPHA_TIE) -> bool:
        """True when the difference is significant at level alpha (two-sided)."""
        return self.p_value < alpha

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {
            "metric": self.metric,
            "estimate_a": self.estimate_a,
            "estimate_b": self.estimate_b,
            "difference": self.difference.to_dict(),
            "p_value": self.p_value,
            "method": self.method,
        }


# --------------------------------------------------------------------------- per-image arrays


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise RecordsError(f"level must lie in (0, 1), got {level}; e.g. 0.95")


# --------------------------------------------------------------------------- one test set


def clopper_pearson(
    successes: np.ndarray | int, trials: np.ndarray | int, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided binomial interval (vectorised): Beta quantiles at (1∓level)/2."""
    _check_level(level)
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, betaincinv(k, n - k + 1, tail), 0.0)
        high = np.where(k < n, betaincinv(k + 1, n - k, 1 - tail), 1.0)
    return low, high


def certified_accuracy_intervals(
    records: Records, radii: Sequence[float] = RADII, level: float = LEVEL
) -> dict[float, Interval]:
    """Certified accuracy at each radius of one test set with its Clopper-Pearson interval."""
    images = set_arrays(records)
    n = len(images.index)
    counts = np.array([images.certified(r).sum() for r in radii])
    low, high = clopper_pearson(counts, n, level)
    return {
        float(r): Interval(float(k / n), float(lo), float(hi), level, "clopper-pearson")
        for r, k, lo, hi in zip(radii, counts, low, high, strict=True)
    }


def bootstrap_means(
    values: np.ndarray, resamples: int = RESAMPLES, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Means of `resamples` bootstrap resamples of the last axis: shape (..., resamples).

    Rows are resampled independently, in chunks of at most _MAX_DRAWS index draws.
    """
    if resamples < 1:
        raise RecordsError(f"resamples must be >= 1, got {resamples}")
    rng = rng if rng is not None else np.random.default_rng(BOOTSTRAP_SEED)
    x = np.asarray(values, dtype=np.float64)
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[1]
    out = np.empty((len(rows), resamples))
    per_chunk = max(1, _MAX_DRAWS // (n * resamples))
    for first in range(0, len(rows), per_chunk):
        block = rows[first : first + per_chunk]
        draws = rng.integers(0, n, size=(len(block), resamples, n), dtype=np.int32)
        out[first : first + len(block)] = np.take_along_axis(block[:, None, :], draws, axis=2).mean(
            axis=2
        )
    return out.reshape(*x.shape[:-1], resamples)


def percentile_bounds(replicates: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, ...]:
    """(low, high) percentile-bootstrap bounds over the last axis."""
    _check_level(level)
    tail = (1 - level) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail], axis=-1)
    return low, high


def acr_interval(
    records: Records,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """ACR of one test set with its percentile-bootstrap interval over images."""
    score = set_arrays(records).score
    replicates = bootstrap_means(score, resamples, np.random.default_rng(seed))
    low, high = percentile_bounds(replicates, level)
    return Interval(float(score.mean()), float(low), float(high), level, "bootstrap")


def pa_band(records: Records, grid: np.ndarray = PA_GRID, level: float = LEVEL) -> Band:
    """The p_A curve of Sun et al., ICML 2025 (fraction with correct ∧ p̂_A ≥ x) with a simultaneous
    band.

    ε is the exact Kolmogorov quantile for n images (valid, conservative for the discrete
    p̂_A); DKW-Massart's sqrt(ln(2/(1−level))/(2n)) would be slightly wider.
    """
    _check_level(level)
    images = set_arrays(records)
    n = len(images.index)
    figure = "the p_A curve"
    correct, pa_hat = images.need("correct", figure), images.need("pa_hat", figure)
    values = np.sort(np.where(correct, pa_hat, -1.0))
    curve = (n - np.searchsorted(values, grid - 1e-12, side="left")) / n
    from scipy.stats import kstwo  # lazily: scipy.stats costs ~1 s to import, compare skips it

    epsilon = float(kstwo.ppf(level, n))
    return Band(
        grid=grid,
        curve=curve,
        low=np.clip(curve - epsilon, 0.0, 1.0),
        high=np.clip(curve + epsilon, 0.0, 1.0),
        half_width=epsilon,
        level=level,
        method="kolmogorov",
    )


def dkw_half_width(n: int, level: float = LEVEL) -> float:
    """DKW-Massart half-width sqrt(ln(2/(1−level))/(2n)) (an upper bound on pa_band's ε)."""
    _check_level(level)
    return float(np.sqrt(np.log(2 / (1 - level)) / (2 * n)))


# --------------------------------------------------------------------------- benchmarks


@dataclass(frozen=True)
class _Matrix:
    """Per-image terms of several test sets: (sets, images) when the sets share images."""

    names: tuple[str, ...]
    sets: tuple[SetArrays, ...]
    shared: bool

    def terms(self, radius: float | None) -> list[np.ndarray]:
        """Per-set arrays of ACR terms (radius None) or certified-at-radius indicators."""
        return [s.score if radius is None else s.certified(radius) for s in self.sets]


def _matrix(benchmark: Benchmark) -> _Matrix:
    if not benchmark:
        raise RecordsError("a benchmark needs records of at least one test set")
    names = tuple(sorted(benchmark))
    sets = tuple(set_arrays(benchmark[name]) for name in names)
    shared = all(np.array_equal(s.index, sets[0].index) for s in sets)
    return _Matrix(names, sets, shared)


def benchmark_replicates(
    terms: list[np.ndarray], shared: bool, resamples: int, seed: int
) -> tuple[float, np.ndarray, str]:
    """Estimate (mean over sets of per-set means) and its bootstrap replicates."""
    rng = np.random.default_rng(seed)
    estimate = float(np.mean([t.mean() for t in terms]))
    if shared:
        per_image = np.mean(terms, axis=0)  # each source image's mean over the sets
        return estimate, bootstrap_means(per_image, resamples, rng), "cluster bootstrap"
    replicates = np.mean([bootstrap_means(t, resamples, rng) for t in terms], axis=0)
    return estimate, replicates, "stratified bootstrap"


def macr_interval(
    benchmark: Benchmark,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """mACR (mean ACR over the test sets) with its bootstrap interval over source images."""
    m = _matrix(benchmark)
    estimate, replicates, method = benchmark_replicates(m.terms(None), m.shared, resamples, seed)
    low, high = percentile_bounds(replicates, level)
    return Interval(estimate, float(low), float(high), level, method)


def mean_certified_accuracy_intervals(
    benchmark: Benchmark,
    radii: Sequence[float] = RADII,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[float, Interval]:
    """Certified accuracy at each radius averaged over test sets, bootstrap intervals."""
    m = _matrix(benchmark)
    out = {}
    for r in radii:
        estimate, replicates, method = benchmark_replicates(m.terms(r), m.shared, resamples, seed)
        low, high = percentile_bounds(replicates, level)
        out[float(r)] = Interval(estimate, float(low), float(high), level, method)
    return out


# --------------------------------------------------------------------------- paired tests


def _paired_sets(a: Records | Benchmark, b: Records | Benchmark) -> tuple[_Matrix, _Matrix]:
    """Both entries as benchmarks over the same test sets and the same images."""
    ma = _matrix(a if isinstance(a, Mapping) else {"": a})
    mb = _matrix(b if isinstance(b, Mapping) else {"": b})
    if ma.names != mb.names:
        raise RecordsError(
            f"entries cover different test sets: {sorted(set(ma.names) ^ set(mb.names))} "
            "appear in only one; compare entries of the same benchmark"
        )
    for name, sa, sb in zip(ma.names, ma.sets, mb.sets, strict=True):
        if not np.array_equal(sa.index, sb.index):
            raise RecordsError(
                f"test set {name or 'records'!r}: the entries were certified on different "
                "images; a paired comparison needs the same image indices in both"
            )
    return ma, mb


def bootstrap_p_value(difference: float, replicates: np.ndarray) -> np.ndarray:
    """Two-sided bootstrap p-value of H0: no difference, from the centred replicates.

    p = (1 + #{|Δ* − Δ| ≥ |Δ|}) / (B + 1); vectorised over leading axes of `replicates`.
    """
    centred = np.abs(replicates - np.asarray(difference)[..., None])
    extreme = (centred >= np.abs(np.asarray(difference))[..., None] - 1e-15).sum(axis=-1)
    return (1 + extreme) / (replicates.shape[-1] + 1)


def compare_acr(
    a: Records | Benchmark,
    b: Records | Benchmark,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> PairedTest:
    """Paired bootstrap test of ACR (one test set) or mACR (a mapping of test sets): A − B."""
    ma, mb = _paired_sets(a, b)
    differences = [ta - tb for ta, tb in zip(ma.terms(None), mb.terms(None), strict=True)]
    estimate, replicates, method = benchmark_replicates(differences, ma.shared, resamples, seed)
    low, high = percentile_bounds(replicates, level)
    metric = "acr" if len(ma.names) == 1 and not isinstance(a, Mapping) else "macr"
    return PairedTest(
        metric=metric,
        estimate_a=float(np.mean([t.mean() for t in ma.terms(None)])),
        estimate_b=float(np.mean([t.mean() for t in mb.terms(None)])),
        difference=Interval(estimate, float(low), float(high), level, f"paired {method}"),
        p_value=float(bootstrap_p_value(estimate, replicates)),
        method=f"paired {method}",
    )


def compare_certified_accuracy(
    a: Records | Benchmark,
    b: Records | Benchmark,
    radius: float,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> PairedTest:
    """A − B in certified accuracy at `radius`: exact McNemar for one test set; for several
    test sets (images shared, so not independent pairs) the paired bootstrap of the mean."""
    ma, mb = _paired_sets(a, b)
    ta, tb = ma.terms(radius), mb.terms(radius)
    estimate_a = float(np.mean([t.mean() for t in ta]))
    estimate_b = float(np.mean([t.mean() for t in tb]))
    metric = f"certified_accuracy@{radius:g}"
    if len(ta) > 1:
        differences = [x - y for x, y in zip(ta, tb, strict=True)]
        estimate, replicates, method = benchmark_replicates(differences, ma.shared, resamples, seed)
        low, high = percentile_bounds(replicates, level)
        return PairedTest(
            metric=metric,
            estimate_a=estimate_a,
            estimate_b=estimate_b,
            difference=Interval(estimate, float(low), float(high), level, f"paired {method}"),
            p_value=float(bootstrap_p_value(estimate, replicates)),
            method=f"paired {method}",
        )
    return mcnemar(ta[0].astype(bool), tb[0].astype(bool), metric, level)


def sign_test_p_value(successes: int, trials: int) -> float:
    """Exact two-sided p-value of Binomial(trials, 1/2): 2·P(X ≤ min(k, trials − k)), at most 1.

    The distribution is symmetric, so this equals ``scipy.stats.binomtest(k, trials, 0.5)``'s
    "sum of the outcomes no likelier than k" (tested), without importing scipy.stats."""
    if trials == 0:
        return 1.0
    smaller = min(successes, trials - successes)
    if 2 * smaller == trials:
        return 1.0
    return float(min(1.0, 2.0 * bdtr(smaller, trials, 0.5)))


def mcnemar(a: np.ndarray, b: np.ndarray, metric: str, level: float) -> PairedTest:
    """Exact McNemar: discordant images split Binomial(b + c, 1/2) under H0; the interval of
    the difference is Wald's for paired proportions (clipped), only the p-value is exact."""
    n = len(a)
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    discordant = only_a + only_b
    p_value = sign_test_p_value(only_a, discordant)
    difference = (only_a - only_b) / n
    spread = np.sqrt(max(discordant / n - difference**2, 0.0) / n)
    z = float(ndtri((1 + level) / 2))
    return PairedTest(
        metric=metric,
        estimate_a=float(a.mean()),
        estimate_b=float(b.mean()),
        difference=Interval(
            difference,
            max(-1.0, difference - z * spread),
            min(1.0, difference + z * spread),
            level,
            "wald (paired)",
        ),
        p_value=p_value,
        method="exact mcnemar",
    )


# --------------------------------------------------------------------------- leaderboard ties


@dataclass(frozen=True)
class Tie:
    """How an entry stands against the entry ranked just above it."""

    rank_above: int
    test: PairedTest
    tied: bool


def tied_with_above(
    entries: Sequence[Records | Benchmark],
    *,
    metric: str = "acr",
    radius: float | None = None,
    alpha: float = ALPHA_TIE,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[Tie | None]:
    """For entries in leaderboard order (rank 1 first), whether each is tied with the one
    above: the paired test of `metric` ("acr" = ACR/mACR, or "certified_accuracy" at `radius`)
    does not reject equality at level `alpha`. Each adjacent pair is one test (no multiplicity
    correction: "tied with #3" says only that #3 and #4 are not distinguishable)."""
    if metric not in ("acr", "certified_accuracy"):
        raise RecordsError(f"metric {metric!r} is not supported; use acr or certified_accuracy")
    if metric == "certified_accuracy" and radius is None:
        raise RecordsError("metric certified_accuracy needs a radius, e.g. radius=0.5")
    marks: list[Tie | None] = [None] if entries else []
    for rank in range(1, len(entries)):
        above, here = entries[rank - 1], entries[rank]
        if radius is None or metric == "acr":
            test = compare_acr(above, here, resamples=resamples, seed=seed)
        else:
            test = compare_certified_accuracy(above, here, radius, resamples=resamples, seed=seed)
        marks.append(Tie(rank_above=rank, test=test, tied=not test.significant(alpha)))
    return marks
