"""95 % intervals and paired-test terms of the leaderboard figures of the stages beyond
certification, from their merged records (``Stage.uncertainty``; the science is
``certbench.pd.terms``, ``certbench.fourier.terms``, ``certbench.lens.terms``,
``certbench.weather.terms`` and ``certbench.stats.terms``):

- robustness (PD stage): clean, ℓ∞ and ℓ∞ ∩ PD accuracy of the base classifier, each a
  proportion of the clean subset's images: Clopper-Pearson; paired test exact McNemar;
- worst-case weather: an accuracy of one set is Clopper-Pearson; accuracies averaged over
  severities or sets, the attacked certified accuracy and ACR (means over sets of the same
  images) are cluster-bootstrap intervals over images; paired tests McNemar for one set, else
  the paired bootstrap;
- Fourier sensitivity: a band's mean ACR or base accuracy is the mean over images of each
  image's mean over the band's cells: bootstrap over images (the cells of one image are
  correlated, so a binomial interval over image × cell pairs would be far too narrow);
  paired bootstrap;
- Fourier lens: the Gaussian intervals of averages ``certbench.lens.metrics`` computes, paired
  bootstrap over the benchmark's paths.

Every function maps the core's figure names to the stage's metric keys; a key the protocol did
not measure gets null bounds, as its figure is null.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.stages.base import Uncertainty

if TYPE_CHECKING:
    from certbench.stats import FigureTerms

#: PD stage key → core figure (``certbench.pd.terms.robustness_terms``).
ROBUSTNESS_FIGURES = {
    "base_accuracy": "clean_accuracy",
    **{f"{kind}_acc_{eps}": f"{kind}_robust_accuracy_{eps}" for kind in ("linf", "pd")
       for eps in (8, 16)},
}  # fmt: skip


def from_terms(figures: Mapping[str, FigureTerms | None]) -> Uncertainty:
    """Intervals of every key (null for a figure without terms) and the terms table."""
    from certbench.stats import figure_interval, terms_table

    intervals: dict[str, tuple[float | None, float | None]] = {}
    for key, terms in figures.items():
        found = None if terms is None else figure_interval(terms)
        intervals[key] = (None, None) if found is None else (found.low, found.high)
    present = {key: terms for key, terms in figures.items() if terms is not None}
    return Uncertainty(intervals, terms_table(present) if present else None)


def robustness_uncertainty(records: Mapping[str, Path]) -> Uncertainty:
    """The PD stage's one unit of merged records (clean subset × ε)."""
    from certbench.pd import robustness_terms
    from certbench.smoothing import read_table

    (path,) = records.values()
    terms = robustness_terms(read_table(path))
    return from_terms({key: terms.get(name) for key, name in ROBUSTNESS_FIGURES.items()})


def weather_uncertainty(records: Mapping[str, Path]) -> Uncertainty:
    """Every attack unit's merged records (the examples unit is left out), by record kind."""
    from certbench.weather import read_weather_records, weather_terms
    from models.stages.weather_attack.figures import FIGURES
    from models.stages.weather_attack.protocol import EXAMPLES, parse_unit

    by_kind: dict[str, list[Any]] = {"base": [], "smoothed": []}
    for unit, path in sorted(records.items()):
        if unit != EXAMPLES:
            by_kind[parse_unit(unit)[0]] += read_weather_records(path)
    terms = {kind: weather_terms(rows) for kind, rows in by_kind.items() if rows}
    figures = {key: terms.get(kind, {}).get(name) for key, (kind, name) in FIGURES.items()}
    figures["weather_random"] = terms["base"].get("random_accuracy")
    return from_terms(figures)


def sensitivity_uncertainty(
    protocol: Mapping[str, Any],
    records: Mapping[str, Path],
    keys: Mapping[str, Mapping[str, str]],
) -> Uncertainty:
    """The merged map's records, on the protocol's grid (``grid_size``); ``keys`` maps each
    figure name and band to the stage's key (the stage's ``KEYS``, passed in so that this module
    imports no stage)."""
    from certbench.fourier import read_sensitivity_records, sensitivity_terms

    (path,) = records.values()
    terms = sensitivity_terms(read_sensitivity_records(path), size=int(protocol["grid_size"]))
    return from_terms(
        {key: terms.get(f"{name}:{band}") for name, bands in keys.items() for band, key in
         bands.items()}
    )  # fmt: skip


def lens_uncertainty(
    records: Mapping[str, Path], suffix_of: Mapping[str, str], keys: Sequence[str]
) -> Uncertainty:
    """Each unit's (``base``, ``smoothed``) summary intervals and path terms; ``suffix_of``
    names each unit's key suffix (``""``, ``"_smoothed"``); ``keys`` every figure the protocol
    stores (null bounds for a kind it does not run)."""
    from certbench.lens import METRICS as METRIC_NAMES
    from certbench.lens import lens_terms, read_lens_records, summarize
    from certbench.stats import terms_table

    intervals: dict[str, tuple[float | None, float | None]] = dict.fromkeys(keys, (None, None))
    terms: dict[str, FigureTerms] = {}
    for unit, path in records.items():
        rows = read_lens_records(path)
        suffix = suffix_of[unit]
        summary = summarize(rows)
        for name, estimate in {**summary.metrics, **summary.nyquist}.items():
            if name + suffix in intervals:
                intervals[name + suffix] = (_finite(estimate.low), _finite(estimate.high))
        terms.update(
            {
                name + suffix: found
                for name, found in lens_terms(rows).items()
                if name in METRIC_NAMES or name + suffix in intervals
            }
        )
    return Uncertainty(intervals, terms_table(terms) if terms else None)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
