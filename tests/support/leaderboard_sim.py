"""Simulated leaderboards with known true figures, for checking interval coverage.

A finite *population* of source images, each with a latent difficulty shared by every test set
(the corrupted versions of one source image succeed or fail together, as in CIFAR-C/-F), and a
set-specific margin m = shift_k − difficulty + noise. An image is correct when m > 0 and its
radius is σ·min(m, 3.81) (σ = 0.25: radii in [0, 0.953] like α = 0.001, n = 100,000); its
p̂_A is Φ(m). Test sets are drawn from the population with replacement, so the true figures
are the population's exact means: no Monte Carlo error in the truth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

SIGMA = 0.25


@dataclass(frozen=True)
class Population:
    """Per-set, per-source-image values of the population: arrays (sets, images)."""

    correct: np.ndarray
    radius: np.ndarray
    pa_hat: np.ndarray

    @property
    def score(self) -> np.ndarray:
        """radius·1[correct], the per-image term of ACR."""
        return np.where(self.correct, self.radius, 0.0)

    def certified_at(self, radius: float) -> np.ndarray:
        """1[correct ∧ radius ≥ r], the per-image term of certified accuracy."""
        return self.correct & (self.radius >= radius)

    def map(self, change: Callable[[np.ndarray], np.ndarray]) -> Population:
        """The same change applied to every array (selecting sets, boards or images)."""
        return Population(change(self.correct), change(self.radius), change(self.pa_hat))


def population(
    sets: int = 8, images: int = 100_000, shared: float = 1.0, seed: int = 0
) -> Population:
    """`shared` scales the difficulty common to all sets (0: independent sets)."""
    rng = np.random.default_rng(seed)
    difficulty = shared * rng.normal(size=images)
    shifts = np.linspace(1.2, -0.2, sets)[:, None]
    margin = shifts - difficulty[None, :] + rng.normal(scale=0.7, size=(sets, images))
    correct = margin > 0
    radius = np.where(correct, SIGMA * np.minimum(margin, 3.81), 0.0)
    return Population(correct=correct, radius=radius, pa_hat=norm.cdf(margin))


def draw(
    pop: Population, leaderboards: int, images: int, seed: int
) -> tuple[np.ndarray, Population]:
    """Source-image indices (leaderboards, images) and the drawn values (sets, boards, images)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, pop.correct.shape[1], size=(leaderboards, images))
    return idx, pop.map(lambda x: x[:, idx])


def binomial_slack(level: float, trials: int, sds: float = 3.0) -> float:
    """`sds` standard errors of an observed coverage fraction over `trials` simulations."""
    return sds * float(np.sqrt(level * (1 - level) / trials))
