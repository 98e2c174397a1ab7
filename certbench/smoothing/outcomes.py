"""What CERTIFY and PREDICT record per image, and the bound and radius computed from the counts.

Kept free of torch (and of ``scipy.stats``) so that reading records and computing metrics —
``certbench metrics``, ``certbench compare``, the service's figures — does not pay for
importing the sampling machinery: the Clopper-Pearson bound is ``scipy.special.betaincinv`` and
Φ⁻¹ is ``scipy.special.ndtri``, the very functions behind ``scipy.stats.beta.ppf`` and
``scipy.stats.norm.ppf`` (the same values to 1e-12: ``tests/certbench/test_smoothing.py``),
imported on first use so the API's pages, which import this module, start without SciPy.
Definitions:
Cohen, Rosenfeld & Kolter, "Certified Adversarial Robustness via Randomized Smoothing", ICML
2019, https://arxiv.org/abs/1902.02918 (CERTIFY, Theorem 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "ABSTAIN",
    "CertifyRecord",
    "PredictRecord",
    "certified_radius",
    "lower_confidence_bound",
    "min_count_to_certify",
]

ABSTAIN = -1
"""Prediction value of an abstention (radius 0)."""


@dataclass(frozen=True, slots=True)
class CertifyRecord:
    """Outcome of CERTIFY on one image; counts are kept so metrics can be recomputed at any α."""

    index: int
    label: int
    prediction: int
    radius: float
    pa_lower: float
    selected: int
    n_a: int
    n_y: int
    n: int
    n0: int
    correct: bool
    seconds: float
    sigma: float
    alpha: float
    early_abstain: bool = False


@dataclass(frozen=True, slots=True)
class PredictRecord:
    """Outcome of PREDICT on one image."""

    index: int
    label: int
    prediction: int
    count1: int
    count2: int
    p_value: float
    n: int
    correct: bool
    seconds: float
    sigma: float
    alpha: float


def lower_confidence_bound(n_a: int, n: int, alpha: float) -> float:
    """One-sided (1−α) Clopper-Pearson lower bound on p_A: the α quantile of Beta(n_a, n−n_a+1)."""
    if n_a <= 0:
        return 0.0
    from scipy.special import betaincinv  # on first use: the service's pages import this module

    return float(betaincinv(n_a, n - n_a + 1, alpha))


def certified_radius(pa_lower: float, sigma: float) -> float:
    """σ·Φ⁻¹(p̲_A), or 0 when the bound does not exceed 1/2 (abstain)."""
    from scipy.special import ndtri

    return float(sigma * ndtri(pa_lower)) if pa_lower >= 0.5 else 0.0


@lru_cache(maxsize=256)
def min_count_to_certify(n: int, alpha: float) -> int:
    """Smallest n_A whose lower bound reaches 1/2 (n+1 if none): the early-abstain threshold."""
    lo, hi = 0, n + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if mid <= n and lower_confidence_bound(mid, n, alpha) >= 0.5:
            hi = mid
        else:
            lo = mid + 1
    return lo
