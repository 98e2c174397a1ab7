"""β schedules of diffusion models and the step one-shot denoising starts from (numpy, no torch).

Schedules, in float64 as the reference code computes them (openai/improved-diffusion,
``improved_diffusion/gaussian_diffusion.py``, ``get_named_beta_schedule``, copied unchanged into
ethz-spylab/diffusion_denoised_smoothing as ``cifar10/improved_diffusion/gaussian_diffusion.py``):

- ``linear``: Ho, Jain & Abbeel, "Denoising Diffusion Probabilistic Models", NeurIPS 2020
  (arXiv:2006.11239): β from 10⁻⁴ to 0.02 in T = 1,000 equal steps
  (``np.linspace(1e-4, 0.02, T)``). For another T both ends are scaled by 1000/T, as
  improved-diffusion does ("extended to work for any number of diffusion steps").
- ``cosine``: Nichol & Dhariwal, "Improved Denoising Diffusion Probabilistic Models", ICML 2021
  (arXiv:2102.09672), Eq. 17: ᾱ(t) = f(t)/f(0), f(t) = cos²((t/T + s)/(1 + s) · π/2) with
  s = 0.008, discretised as β_i = min(1 − f((i+1)/T)/f(i/T), 0.999) (``betas_for_alpha_bar``).

Indices are 0-based as in both codes (and diffusers' schedulers): ``alphas_cumprod[i]`` is
∏_{j ≤ i}(1 − β_j), the signal kept after i + 1 forward steps, and the network is called with
the timestep i.

The step of one-shot denoising (Carlini, Tramèr, Dvijotham, Rice, Sun & Kolter, "(Certified!!)
Adversarial Robustness for Free!", ICLR 2023, arXiv:2206.10550): pixels scaled to [−1, 1] carry
noise 2σ, and the step whose noise-to-signal ratio √(1 − ᾱ_t)/√ᾱ_t matches it is used. The
released code (ethz-spylab/diffusion_denoised_smoothing, ``cifar10/certify.py`` and
``imagenet/certify.py``) finds it with a loop::

    target_sigma = args.sigma * 2
    real_sigma = 0
    t = 0
    while real_sigma < target_sigma:
        t += 1
        a = model.diffusion.sqrt_alphas_cumprod[t]
        b = model.diffusion.sqrt_one_minus_alphas_cumprod[t]
        real_sigma = b / a

that is, the smallest index t ≥ 1 whose ratio reaches 2σ: ᾱ[t] ≤ 1/(1 + (2σ)²) < ᾱ[t − 1]
(0-based ᾱ). :func:`carlini_timestep` reproduces that choice bit for bit (the same float64
ratios, the same comparison, t = 0 never chosen). Written with the 1-based ᾱ of the papers
(ᾱ_t = ``alphas_cumprod[t - 1]``), the same integer satisfies ᾱ_t ≥ 1/(1 + (2σ)²) > ᾱ_{t+1};
the code then uses ``alphas_cumprod[t]``, the noise level one step past it, for both the
scaling and the network's timestep. On the linear 1,000-step schedule it gives t = 70, 145, 259,
396 for σ = 0.12, 0.25, 0.5, 1.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "COSINE_MAX_BETA",
    "COSINE_OFFSET",
    "LINEAR_BETA_END",
    "LINEAR_BETA_START",
    "BetaSchedule",
    "NoiseSchedule",
    "carlini_timestep",
    "cosine_betas",
    "linear_betas",
]

BetaSchedule = Literal["linear", "cosine"]

LINEAR_BETA_START = 1e-4
LINEAR_BETA_END = 0.02
"""Ho et al.'s β_1 and β_T for T = 1,000 steps."""
COSINE_OFFSET = 0.008
"""Nichol & Dhariwal's s: "a small offset s to prevent β_t from being too small near t = 0"."""
COSINE_MAX_BETA = 0.999
"""Nichol & Dhariwal clip β_t "to be no larger than 0.999 to prevent singularities at the end of
the diffusion process near t = T"."""


def linear_betas(steps: int) -> np.ndarray:
    """Ho et al.'s linear β schedule over ``steps`` steps (ends scaled by 1000/steps)."""
    scale = 1000 / steps
    return np.linspace(scale * LINEAR_BETA_START, scale * LINEAR_BETA_END, steps, dtype=np.float64)


def cosine_betas(steps: int) -> np.ndarray:
    """Nichol & Dhariwal's cosine β schedule over ``steps`` steps (s = 0.008, β ≤ 0.999)."""

    def alpha_bar(t: float) -> float:
        return math.cos((t + COSINE_OFFSET) / (1 + COSINE_OFFSET) * math.pi / 2) ** 2

    return np.array(
        [
            min(1 - alpha_bar((i + 1) / steps) / alpha_bar(i / steps), COSINE_MAX_BETA)
            for i in range(steps)
        ]
    )


@dataclass(frozen=True)
class NoiseSchedule:
    """A diffusion model's β schedule and the cumulative products the denoiser needs (float64)."""

    kind: BetaSchedule
    steps: int
    betas: np.ndarray
    alphas_cumprod: np.ndarray

    @classmethod
    def named(cls, kind: BetaSchedule, steps: int) -> NoiseSchedule:
        """The ``kind`` schedule of ``steps`` steps; ValueError for an unknown kind or < 2 steps."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
            raise ValueError(f"a β schedule needs an integer number of steps >= 2, got {steps!r}")
        if kind == "linear":
            betas = linear_betas(steps)
        elif kind == "cosine":
            betas = cosine_betas(steps)
        else:
            raise ValueError(f"unknown β schedule {kind!r}; choose linear or cosine")
        if not (betas < 1).all():
            # the linear ends scale by 1000/T: β_T = 20/T reaches 1 (ᾱ = 0) at T = 20
            raise ValueError(
                f"a {kind} schedule of {steps} steps has β ≥ 1 (no signal left); use more "
                "than 20 steps"
            )
        return cls(kind, steps, betas, np.cumprod(1.0 - betas, axis=0))

    def timestep(self, sigma: float) -> int:
        """Carlini et al.'s step for smoothing noise ``sigma`` (:func:`carlini_timestep`)."""
        return carlini_timestep(self.alphas_cumprod, sigma)

    def coefficients(self, t: int) -> tuple[float, float, float]:
        """(√ᾱ_t, √(1/ᾱ_t), √(1/ᾱ_t − 1)) at index ``t``: q_sample's scale and the two factors of
        improved-diffusion's ``_predict_xstart_from_eps`` (float64, as the code's arrays)."""
        alpha_bar = self.alphas_cumprod
        return (
            float(np.sqrt(alpha_bar)[t]),
            float(np.sqrt(1.0 / alpha_bar)[t]),
            float(np.sqrt(1.0 / alpha_bar - 1)[t]),
        )


def carlini_timestep(alphas_cumprod: np.ndarray, sigma: float) -> int:
    """The step the released one-shot denoising code picks for noise ``sigma`` in [0, 1] pixels.

    The smallest t ≥ 1 with ``sqrt(1 - ᾱ)[t] / sqrt(ᾱ)[t] >= 2σ`` in float64 (see the module
    docstring for the loop it reproduces). ValueError when σ is not a positive finite number or
    when even the last step's noise stays below 2σ (the release would run off its arrays).
    """
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    alpha_bar = np.asarray(alphas_cumprod, dtype=np.float64)
    ratio = np.sqrt(1.0 - alpha_bar) / np.sqrt(alpha_bar)
    reached = np.nonzero(~(ratio[1:] < sigma * 2))[0]
    if reached.size == 0:
        raise ValueError(
            f"σ = {sigma:g} is beyond this schedule: its last step's noise "
            f"{ratio[-1] / 2:.4g} (in [0, 1] pixels) stays below σ; use more steps or a "
            "schedule that ends noisier"
        )
    return int(reached[0]) + 1
