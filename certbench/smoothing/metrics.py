"""Metrics computed from certification records only (never from a model).

ACR alone rewards easy images (Sun et al., ICML 2025), so every summary also carries certified
accuracy at fixed radii and the distribution of p̂_A = n_y/n, the base classifier's accuracy under
noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.smoothing.outcomes import (
    ABSTAIN,
    CertifyRecord,
    certified_radius,
    lower_confidence_bound,
)

RADII = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Radius grid (ℓ2 over [0,1] pixels) reported in every summary."""

PA_GRID = np.round(np.arange(500, 1001) / 1000, 3)
"""x-axis of the p_A curve of Sun et al., ICML 2025: 0.500, 0.501, ..., 1.000."""

PA_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)

CIFAR_C_BANDS: Mapping[str, tuple[str, ...]] = {
    "low": ("brightness", "fog", "frost", "snow", "contrast"),
    "mid": ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "elastic_transform"),
    "high": ("gaussian_noise", "impulse_noise", "shot_noise", "pixelate", "jpeg_compression"),
}
"""The hand grouping (Sun et al., ECCV 2022) of CIFAR-C corruptions by the spectrum of their
perturbation."""

Records: TypeAlias = Sequence[CertifyRecord] | pa.Table


@dataclass(frozen=True)
class Summary:
    """Headline metrics of one test set."""

    count: int
    acr: float
    clean_accuracy: float
    certified_accuracy: dict[float, float]
    abstain_rate: float
    pa_median: float
    pa_quantiles: dict[float, float]
    seconds: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (radii and quantiles as string keys)."""
        data = asdict(self)
        data["certified_accuracy"] = {f"{r:g}": v for r, v in self.certified_accuracy.items()}
        data["pa_quantiles"] = {f"{q:g}": v for q, v in self.pa_quantiles.items()}
        return data


def _columns(records: Records) -> dict[str, np.ndarray]:
    if isinstance(records, pa.Table):
        return {name: records.column(name).to_numpy() for name in records.column_names}
    if not records:
        raise RecordsError("no records: metrics need at least one certified image")
    names = ("prediction", "label", "radius", "correct", "n_y", "n", "seconds")
    return {name: np.array([getattr(r, name) for r in records]) for name in names}


def _nonempty(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if len(columns["radius"]) == 0:
        raise RecordsError("no records: metrics need at least one certified image")
    return columns


def acr(records: Records) -> float:
    """Average certified radius; wrong or abstained images count as radius 0."""
    c = _nonempty(_columns(records))
    return float(np.mean(np.where(c["correct"], c["radius"], 0.0)))


def certified_accuracy(records: Records, radii: Sequence[float] = RADII) -> dict[float, float]:
    """Fraction of images that are correct with certified radius ≥ r, for each r."""
    c = _nonempty(_columns(records))
    return {float(r): _certified_at(c, r) for r in radii}


def _certified_at(c: dict[str, np.ndarray], r: float) -> float:
    return float(np.mean(c["correct"] & (c["radius"] >= r)))


def certified_accuracy_curve(records: Records) -> tuple[np.ndarray, np.ndarray]:
    """The full step curve: radii (0 and every distinct certified radius) and accuracy at each."""
    c = _nonempty(_columns(records))
    radii = np.unique(np.concatenate([[0.0], c["radius"][c["correct"]]]))
    accuracy = np.array([_certified_at(c, r) for r in radii])
    return radii, accuracy


def pa_hat(records: Records) -> np.ndarray:
    """p̂_A = n_y / n per image: the base classifier's accuracy on the noisy samples."""
    c = _nonempty(_columns(records))
    return c["n_y"] / np.maximum(c["n"], 1)


def pa_ecdf(records: Records, grid: np.ndarray = PA_GRID) -> np.ndarray:
    """The p_A curve of Sun et al., ICML 2025: for each x, the fraction of images with correct ∧
    p̂_A ≥ x."""
    c = _nonempty(_columns(records))
    pa = c["n_y"] / np.maximum(c["n"], 1)
    correct_pa = np.sort(np.where(c["correct"], pa, -1.0))
    at_least = len(correct_pa) - np.searchsorted(correct_pa, grid - 1e-12, side="left")
    return at_least / len(correct_pa)


def pa_quantiles(records: Records, qs: Sequence[float] = PA_QUANTILES) -> dict[float, float]:
    """Quantiles of p̂_A over all images."""
    values = pa_hat(records)
    return {float(q): float(np.quantile(values, q)) for q in qs}


def summarize(records: Records, radii: Sequence[float] = RADII) -> Summary:
    """ACR, certified accuracy on the radius grid, abstain rate and the p̂_A distribution."""
    c = _nonempty(_columns(records))
    quantiles = pa_quantiles(records)
    return Summary(
        count=len(c["radius"]),
        acr=acr(records),
        clean_accuracy=float(np.mean(c["correct"])),
        certified_accuracy=certified_accuracy(records, radii),
        abstain_rate=float(np.mean(c["prediction"] == ABSTAIN)),
        pa_median=float(np.median(pa_hat(records))),
        pa_quantiles=quantiles,
        seconds=float(np.sum(c["seconds"])),
    )


def macr(acr_by_set: Mapping[str, float]) -> float:
    """Mean ACR over the test sets of a benchmark (the mACR of Sun et al., ECCV 2022)."""
    if not acr_by_set:
        raise RecordsError("mACR needs at least one test set")
    return float(np.mean(list(acr_by_set.values())))


def band_means(
    acr_by_corruption: Mapping[str, float],
    bands: Mapping[str, Sequence[str]] = CIFAR_C_BANDS,
) -> dict[str, float]:
    """Mean ACR per spectral band (mACR-low/-mid/-high of Sun et al., ECCV 2022, Table 2).

    `acr_by_corruption` holds one ACR per corruption, already averaged over its severities.
    """
    means: dict[str, float] = {}
    for band, members in bands.items():
        missing = [m for m in members if m not in acr_by_corruption]
        if missing:
            raise RecordsError(f"band {band!r} needs ACR of corruptions {missing}")
        means[band] = float(np.mean([acr_by_corruption[m] for m in members]))
    return means


def mean_by_group(values: Mapping[str, float], group_of: Mapping[str, str]) -> dict[str, float]:
    """Average values that share a group, e.g. ACR of `fog_s1..fog_s5` into `fog`."""
    groups: dict[str, list[float]] = {}
    for key, value in values.items():
        if key not in group_of:
            raise RecordsError(f"no group is given for {key!r}")
        groups.setdefault(group_of[key], []).append(value)
    return {group: float(np.mean(members)) for group, members in groups.items()}


def recompute_at_alpha(records: Sequence[CertifyRecord], alpha: float) -> list[CertifyRecord]:
    """Bounds, predictions and radii at another α from the stored counts.

    Early-abstained records drew fewer than n samples; at a stricter α they stay abstained,
    but a looser α would need the samples that were never drawn.
    """
    if not 0 < alpha < 1:
        raise RecordsError(f"alpha must lie in (0, 1), got {alpha}")
    out = []
    for record in records:
        if record.early_abstain and alpha > record.alpha:
            raise RecordsError(
                f"image {record.index} stopped early at alpha={record.alpha}; "
                f"alpha={alpha} needs the full sample, re-run without --early-abstain"
            )
        pa_lower = lower_confidence_bound(record.n_a, record.n, alpha)
        prediction = record.selected if pa_lower >= 0.5 else ABSTAIN
        out.append(
            replace(
                record,
                alpha=alpha,
                pa_lower=pa_lower,
                prediction=prediction,
                radius=certified_radius(pa_lower, record.sigma),
                correct=prediction == record.label,
            )
        )
    return out
