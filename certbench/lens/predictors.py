"""Which metric explains OOD accuracy, fitted as Fridovich-Keil et al., NeurIPS 2022 fit it: per
architecture, then slope and R² averaged over the architectures (their §4.1: "each reported
slope (m) and R² value is the average of the corresponding values among the three architectures
we consider"; §4.2: "we fit a separate regression line to each model architecture and average the
resulting slope and R² values").

Architectures respond differently to an intervention, so one line through every model mixes
between-architecture differences into the fit; the paper's tables average within-architecture
fits instead. The pooled fit (:func:`certbench.lens.effective.metric_predictors` over all entries
of one σ) is kept as a second, labelled view. An architecture enters the average for a metric
only when at least 3 of its entries carry the metric with distinct values (a line needs 3 points);
the others are counted, not fitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from certbench.lens.effective import (
    ID_ACCURACY,
    Entry,
    PredictorFit,
    all_metrics,
    metric_predictors,
    single_sigma,
)

UNKNOWN_ARCHITECTURE = "unknown"
"""The group of entries that name no architecture."""


@dataclass(frozen=True)
class ArchitectureFit:
    """One metric on one OOD set as the paper's tables report it: ``slope`` and ``r2`` are the
    unweighted means over the ``fitted`` architectures with a line (NaN when none has one);
    ``fits`` holds each architecture's own fit (NaN where it has too few entries), ``n`` the
    entries inside fitted architectures and ``counts`` the entries of every architecture that
    carry the metric."""

    ood_set: str
    metric: str
    slope: float
    r2: float
    n: int
    fitted: int
    counts: dict[str, int]
    fits: dict[str, PredictorFit]


def architectures(entries: Sequence[Entry]) -> dict[str, int]:
    """Entries per architecture, by name (the paper's grouping)."""
    out: dict[str, int] = {}
    for e in entries:
        name = e.architecture or UNKNOWN_ARCHITECTURE
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def per_architecture_predictors(
    entries: Sequence[Entry], ood_set: str, metrics: Sequence[str] | None = None
) -> list[ArchitectureFit]:
    """Per metric: a line Φ⁻¹(OOD accuracy) = c + m·metric within each architecture (as
    :func:`~certbench.lens.effective.metric_predictors`), then m and R² averaged over the
    architectures that have one. Entries must share one σ."""
    single_sigma(entries)
    names = list(metrics) if metrics is not None else all_metrics(entries)
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        if ood_set in e.ood:
            groups.setdefault(e.architecture or UNKNOWN_ARCHITECTURE, []).append(e)
    per_group = {
        arch: {f.metric: f for f in metric_predictors(rows, ood_set, names)}
        for arch, rows in sorted(groups.items())
    }
    out = []
    for name in names:
        fits = {arch: found[name] for arch, found in per_group.items()}
        usable = [f for f in fits.values() if math.isfinite(f.r2)]
        counts = {
            arch: sum(name == ID_ACCURACY or name in e.metrics for e in groups[arch])
            for arch in fits
        }
        out.append(
            ArchitectureFit(
                ood_set=ood_set,
                metric=name,
                slope=_mean([f.slope for f in usable]),
                r2=_mean([f.r2 for f in usable]),
                n=sum(f.n for f in usable),
                fitted=len(usable),
                counts=counts,
                fits=fits,
            )
        )
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
