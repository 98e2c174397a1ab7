"""Any leaderboard figure that is a mean of per-unit terms: its 95 % interval and paired tests.

Certification has its own module (``certbench.stats.entry_intervals``); the other evaluation
stages'
figures are all a mean over the sampled images (or paths) of one value per image: an accuracy
(the image is correct, robust, safe: 0/1), a mean of such indicators over several sets of the
same images (mean over severities, over the cells of a heatmap band), a mean of real values (ACR
terms, a path's HFF), or a root-mean-square (the Jacobian norm, Fridovich-Keil et al.,
NeurIPS 2022). ``FigureTerms`` holds those per-unit values, so every figure gets, from its stored
records alone:

- an interval over the sampled units at level 95 %: exact Clopper-Pearson for a proportion of
  one set (0/1 terms; coverage ≥ level for every true value), else the percentile bootstrap over
  units with a fixed seed (``certbench.stats.intervals``: 1,000 resamples, seed 0, so recomputing
  gives the same numbers). A mean over several sets of the *same* images resamples images with all
  their sets at once (a cluster bootstrap): the sets' errors are correlated (Sun et al., ICML 2025
  show how fragile such averages are), so treating them as independent samples would be too narrow;
- a paired test of two entries measured on the same units (a figure of one benchmark's protocol
  is computed on the same images or paths for every entry): exact McNemar for a proportion of
  one set (binomial test on the discordant units), else the paired bootstrap of the difference
  (the same resampled units for both entries; p-value from the centred replicates, Hall &
  Wilson 1991), as certification's ties use.

Terms are stored in a long parquet table (figure, index, value) whose schema metadata names each
figure's kind: the service ranks pages from one small file per entry and stage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.stats.intervals import (
    BOOTSTRAP_SEED,
    LEVEL,
    RESAMPLES,
    Interval,
    PairedTest,
    bootstrap_means,
    bootstrap_p_value,
    clopper_pearson,
    mcnemar,
    percentile_bounds,
)

Kind = Literal["proportion", "mean", "rms"]
"""proportion: terms in [0, 1], a 0/1 indicator when ``sets`` is 1; mean: any real terms; rms:
the figure is sqrt(mean of the terms) (terms are squares)."""
TERMS_METADATA = b"certbench_terms"
_MAX_DRAWS = 1 << 22
"""Bootstrap index draws per chunk of a paired test (16 MiB of int32)."""


@dataclass(frozen=True)
class FigureTerms:
    """One figure as per-unit terms: ``values[k]`` belongs to unit ``index[k]`` (an image index,
    a path's work unit), sorted by index; ``sets`` is how many sets each term averages."""

    index: np.ndarray
    values: np.ndarray
    kind: Kind
    sets: int = 1

    @property
    def estimate(self) -> float:
        """The figure: mean of the terms (their root for ``rms``)."""
        mean = float(self.values.mean())
        return float(np.sqrt(max(mean, 0.0))) if self.kind == "rms" else mean

    @property
    def exact_proportion(self) -> bool:
        """True for a proportion of one set: Clopper-Pearson and McNemar apply."""
        return self.kind == "proportion" and self.sets == 1


def figure_terms(
    index: np.ndarray | list[int],
    values: np.ndarray | list[float],
    kind: Kind,
    sets: int = 1,
) -> FigureTerms:
    """Validated terms sorted by index. Raises RecordsError for no units, a repeated index,
    mismatched lengths, an unknown kind or a one-set proportion that is not 0/1."""
    if kind not in get_args(Kind):
        raise RecordsError(f"kind {kind!r} is not one of {get_args(Kind)}")
    if sets < 1:
        raise RecordsError(f"sets must be >= 1, got {sets}")
    idx = np.asarray(index, dtype=np.int64)
    val = np.asarray(values, dtype=np.float64)
    if idx.ndim != 1 or idx.shape != val.shape:
        raise RecordsError(f"{len(idx)} indices but {len(val)} values: one value per unit")
    if len(idx) == 0:
        raise RecordsError("no units: a figure's interval needs at least one image or path")
    order = np.argsort(idx, kind="stable")
    idx, val = idx[order], val[order]
    if len(np.unique(idx)) != len(idx):
        raise RecordsError("a unit index appears twice; merge shards without overlap first")
    if kind == "proportion" and sets == 1 and not np.isin(val, (0.0, 1.0)).all():
        raise RecordsError("a proportion of one set needs 0/1 terms (correct or not)")
    return FigureTerms(idx, val, kind, sets)


def mean_over_sets(
    sets: Mapping[str, tuple[np.ndarray, np.ndarray]], kind: Kind
) -> FigureTerms | None:
    """The per-unit mean over several sets of the same units (set name → (index, values)):
    the terms of a figure that averages per-set figures over sets sharing their images. None
    when the sets do not share their units (no per-unit term then equals the figure)."""
    if not sets:
        raise RecordsError("a mean over sets needs at least one set")
    parts = [figure_terms(index, values, kind) for index, values in sets.values()]
    if not all(np.array_equal(p.index, parts[0].index) for p in parts):
        return None
    stacked = np.mean([p.values for p in parts], axis=0)
    return figure_terms(parts[0].index, stacked, kind, sets=len(parts))


# --------------------------------------------------------------------------- intervals


def figure_interval(
    terms: FigureTerms,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """The figure with its interval: Clopper-Pearson for a one-set proportion, else the
    percentile bootstrap over units (a cluster bootstrap when terms average several sets; the
    root of the mean's bounds for ``rms``: the root is monotone)."""
    values = terms.values
    if terms.exact_proportion:
        low, high = clopper_pearson(int(values.sum()), len(values), level)
        return Interval(terms.estimate, float(low), float(high), level, "clopper-pearson")
    replicates = bootstrap_means(values, resamples, np.random.default_rng(seed))
    low, high = percentile_bounds(replicates, level)
    method = "cluster bootstrap" if terms.sets > 1 else "bootstrap"
    if terms.kind == "rms":
        low, high = np.sqrt(max(float(low), 0.0)), np.sqrt(max(float(high), 0.0))
    return Interval(terms.estimate, float(low), float(high), level, method)


# --------------------------------------------------------------------------- paired tests


def _joint_replicates(
    a: np.ndarray, b: np.ndarray, resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap means of a and b over the SAME resampled units, in bounded-memory chunks."""
    n = len(a)
    per_chunk = max(1, _MAX_DRAWS // n)
    means_a, means_b = np.empty(resamples), np.empty(resamples)
    for first in range(0, resamples, per_chunk):
        count = min(per_chunk, resamples - first)
        draws = rng.integers(0, n, size=(count, n), dtype=np.int32)
        means_a[first : first + count] = a[draws].mean(axis=1)
        means_b[first : first + count] = b[draws].mean(axis=1)
    return means_a, means_b


def compare_figure(
    a: FigureTerms,
    b: FigureTerms,
    metric: str,
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> PairedTest:
    """Paired test of entry A − entry B on one figure measured on the same units.

    Exact McNemar for a one-set proportion, else the paired bootstrap of the difference of the
    figures (for ``rms`` the difference of the roots of the resampled means). Raises
    RecordsError when the entries were measured on other units or the figures differ in kind.
    """
    if a.kind != b.kind or a.sets != b.sets:
        raise RecordsError(
            f"figure {metric!r}: {a.kind} over {a.sets} set(s) against {b.kind} over {b.sets}"
        )
    if not np.array_equal(a.index, b.index):
        raise RecordsError(
            f"figure {metric!r}: the entries were measured on different images; a paired test "
            "needs the same image indices in both"
        )
    if a.exact_proportion:
        return mcnemar(a.values.astype(bool), b.values.astype(bool), metric, level)
    rng = np.random.default_rng(seed)
    means_a, means_b = _joint_replicates(a.values, b.values, resamples, rng)
    if a.kind == "rms":
        replicates = np.sqrt(np.maximum(means_a, 0)) - np.sqrt(np.maximum(means_b, 0))
    else:
        replicates = means_a - means_b
    estimate = a.estimate - b.estimate
    low, high = percentile_bounds(replicates, level)
    method = f"paired {'cluster bootstrap' if a.sets > 1 else 'bootstrap'}"
    return PairedTest(
        metric=metric,
        estimate_a=a.estimate,
        estimate_b=b.estimate,
        difference=Interval(estimate, float(low), float(high), level, method),
        p_value=float(bootstrap_p_value(estimate, replicates)),
        method=method,
    )


# --------------------------------------------------------------------------- storage


def terms_table(figures: Mapping[str, FigureTerms]) -> pa.Table:
    """Long form (figure, index, value) with each figure's kind and sets in the metadata."""
    names = sorted(figures)
    kinds = {name: {"kind": figures[name].kind, "sets": figures[name].sets} for name in names}
    table = pa.table(
        {
            "figure": pa.array([n for n in names for _ in figures[n].index], pa.string()),
            "index": pa.array(
                np.concatenate([figures[n].index for n in names]) if names else [], pa.int64()
            ),
            "value": pa.array(
                np.concatenate([figures[n].values for n in names]) if names else [], pa.float64()
            ),
        }
    )
    return table.replace_schema_metadata({TERMS_METADATA: json.dumps(kinds, sort_keys=True)})


def terms_from_table(table: pa.Table) -> dict[str, FigureTerms]:
    """Inverse of :func:`terms_table`. Raises RecordsError for a table it did not write."""
    raw = (table.schema.metadata or {}).get(TERMS_METADATA)
    missing = {"figure", "index", "value"} - set(table.column_names)
    if raw is None or missing:
        raise RecordsError("not a figure-terms table; write it with terms_table")
    kinds = json.loads(raw)
    figure = np.asarray(table.column("figure").to_pylist(), dtype=object)
    index = table.column("index").to_numpy()
    value = table.column("value").to_numpy()
    out = {}
    for name, spec in kinds.items():
        chosen = figure == name
        out[name] = figure_terms(index[chosen], value[chosen], spec["kind"], spec["sets"])
    return out
