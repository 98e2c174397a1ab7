"""Consistency regularisers for training base classifiers of smoothed models.

- :func:`gaussian_consistency`: Jeong & Shin (NeurIPS 2020, "Consistency Regularization for
  Certified Robustness of Smoothed Classifiers", arXiv:2006.04062), the regulariser of the
  "Gaussian + JSD" baseline of Sun et al., ECCV 2022: for ``m`` noisy copies
  ``p_i = softmax(f(x + δ_i))`` and their mean ``p̂``, ``λ·(1/m)·Σ_i KL(p̂ ‖ p_i) + η·H(p̂)``. Their
  CIFAR-10 setting: m = 2, λ = 20, η = 0.5 (github.com/jh-jeong/smoothing-consistency,
  ``consistency.py`` and EXPERIMENTS.MD).
- :func:`jensen_shannon`: AugMix's consistency (Hendrycks et al., ICLR 2020): the generalised
  Jensen-Shannon divergence ``(1/n)·Σ_j KL(p_j ‖ M)``, ``M = (1/n)·Σ_j p_j``, weighted by 12 in
  AugMix's and Sun et al.'s training code.
- :func:`hierarchical_consistency`: HCR, Sun et al.'s Eq. 3-4. For views ``x_0 … x_k`` (``x_0`` the
  original) and noise samples ``δ_1 … δ_s``, with ``p_{j,i} = softmax(f(x_j + δ_i))``,
  ``p̄_j = (1/s)·Σ_i p_{j,i}`` and ``p̄ = (1/(k+1))·Σ_j p̄_j``::

      L_G(j) = (1/s)·Σ_i KL(p_{j,i} ‖ p̄_j)                                   (Eq. 3)
      L_HCR  = (1/(k+1))·Σ_j [ λ·KL(p̄_j ‖ p̄) + η·L_G(j) ]                    (Eq. 4)

  Both levels are Jensen-Shannon divergences (the paper: "HCR essentially stacks two levels of
  JSD"): ``L_G(j)`` is the JSD of view j's noisy predictions and the first term the JSD of the
  noise-averaged views. Limits: with one noise sample (s = 1) every ``L_G`` is 0 and HCR is
  ``λ·JSD(p_0, …, p_k)``, AugMix's consistency on noisy views; with one view (k = 0) it is
  ``η·JSD`` over the noise samples. Defaults (Appendix D): η = 10; λ = 40 on CIFAR-10, 20 on
  CIFAR-100; k = 2, s = 2 (§3). The training loss adds ``(1/s)·Σ_i CE(f(x_0 + δ_i), y)``.

  The released code (github.com/jiachens/FourierMix, ``train_fourier.py``, ``new_loss``) computes
  the first level with Jeong & Shin's ``consistency_loss(..., loss='kl')``, i.e.
  ``KL(p̄_j ‖ p_{j,i})``, the reverse of Eq. 3; we follow Eq. 3, whose direction makes both
  levels JSDs as the paper says. The second level matches the release.

Every mean is exact: ``log p̄`` is ``logsumexp`` of the members' log-probabilities minus
``log n`` (the releases clamp the mixture at 1e-7 before the log instead). All losses return the
mean over the batch (``reduction='batchmean'``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from certbench.errors import TrainingError

__all__ = [
    "HCR_ETA",
    "JEONG_SHIN_ETA",
    "JEONG_SHIN_LAMBDA",
    "JSD_WEIGHT",
    "gaussian_consistency",
    "hcr_lambda",
    "hierarchical_consistency",
    "jensen_shannon",
    "kl_divergence",
]

JSD_WEIGHT = 12.0
"""Weight of the JSD consistency in AugMix and in the ``*-jsd`` recipes of Sun et al., ECCV 2022."""
JEONG_SHIN_LAMBDA = 20.0
"""λ of Jeong & Shin's consistency for CIFAR-10 at σ = 0.25."""
JEONG_SHIN_ETA = 0.5
"""η (entropy weight) of Jeong & Shin's consistency."""
HCR_ETA = 10.0
"""η of HCR on CIFAR-10/100 (Sun et al., ECCV 2022, Appendix D)."""


def hcr_lambda(dataset: str) -> float:
    """HCR's λ for a dataset: 20 for CIFAR-100, else CIFAR-10's 40 (Sun et al., ECCV 2022,
    Appendix D)."""
    return 20.0 if "cifar100" in dataset.lower() else 40.0


def kl_divergence(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """``KL(p ‖ q) = Σ_c p_c·(log p_c − log q_c)`` over the last axis, from log-probabilities."""
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def _log_mean(log_probs: torch.Tensor, dim: int) -> torch.Tensor:
    """``log`` of the mean of the distributions along ``dim`` (exact, via logsumexp)."""
    return torch.logsumexp(log_probs, dim=dim) - math.log(log_probs.shape[dim])


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 logits (autocast) are promoted; float64 stays float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _stack(logits: Sequence[torch.Tensor] | torch.Tensor, what: str) -> torch.Tensor:
    stacked = logits if isinstance(logits, torch.Tensor) else torch.stack(list(logits))
    if stacked.ndim != 3 or stacked.shape[0] < 1:
        raise TrainingError(
            f"{what} needs logits of shape (members, batch, classes), got "
            f"{tuple(stacked.shape)}; pass one (batch, classes) tensor per member"
        )
    return _at_least_float32(stacked)


def jensen_shannon(logits: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """Generalised JSD ``(1/n)·Σ_j KL(p_j ‖ M)`` of ``n`` predictions, mean over the batch."""
    log_p = F.log_softmax(_stack(logits, "jensen_shannon"), dim=-1)
    log_m = _log_mean(log_p, dim=0)
    return kl_divergence(log_p, log_m[None]).mean(dim=0).mean()


def gaussian_consistency(
    logits: Sequence[torch.Tensor] | torch.Tensor,
    *,
    lbd: float = JEONG_SHIN_LAMBDA,
    eta: float = JEONG_SHIN_ETA,
) -> torch.Tensor:
    """Jeong & Shin's ``λ·(1/m)·Σ_i KL(p̂ ‖ p_i) + η·H(p̂)`` over ``m`` noisy copies, batch mean."""
    log_p = F.log_softmax(_stack(logits, "gaussian_consistency"), dim=-1)
    log_mean = _log_mean(log_p, dim=0)
    kl = kl_divergence(log_mean[None].expand_as(log_p), log_p).mean(dim=0)
    entropy = -(log_mean.exp() * log_mean).sum(dim=-1)
    return (lbd * kl + eta * entropy).mean()


def hierarchical_consistency(
    logits: torch.Tensor, *, lbd: float, eta: float = HCR_ETA
) -> torch.Tensor:
    """HCR (Sun et al., ECCV 2022, Eq. 4) of logits ``(k+1, s, B, classes)``: views × noise
    samples × batch.

    View 0 is the original image. Returns the batch mean of ``L_HCR``.
    """
    if logits.ndim != 4:
        raise TrainingError(
            f"hierarchical_consistency needs logits (views, samples, batch, classes), got "
            f"{tuple(logits.shape)}"
        )
    log_p = F.log_softmax(_at_least_float32(logits), dim=-1)  # (k+1, s, B, C)
    log_view = _log_mean(log_p, dim=1)  # log p̄_j: (k+1, B, C)
    log_all = _log_mean(log_view, dim=0)  # log p̄: (B, C)
    level_noise = kl_divergence(log_p, log_view[:, None]).mean(dim=1)  # L_G(j): (k+1, B)
    level_views = kl_divergence(log_view, log_all[None])  # (k+1, B)
    return (lbd * level_views + eta * level_noise).mean(dim=0).mean()
