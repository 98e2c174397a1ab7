"""Objectives of the simulation attack (Wang et al., NeurIPS 2022 ML Safety Workshop): what PGD
ascends, per image.

- Base classifier: the cross-entropy of f(x') (their eq. 1), and f's prediction.
- Smoothed classifier: SmoothAdv's loss (Salman et al. 2019, "Provably Robust Deep Learning via
  Adversarially Trained Smoothed Classifiers"), the cross-entropy of the Monte-Carlo soft
  smoothed classifier ``−log (1/m) Σ_j softmax(f(x' + δ_j))_y`` over m noise vectors δ_j that
  stay fixed for the whole attack (SmoothAdv passes one noise draw to every PGD step), so the
  objective is a deterministic function of the particles and iterates compare fairly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from certbench.errors import ThreatModelError
from certbench.nets import RowSlots
from certbench.smoothing import derive_seed, seeded_generator
from certbench.weather.threat import WeatherSet


class Objective(Protocol):
    """(attacked images, labels, per-image noise or None, row slots) -> (loss per image,
    predicted class). ``slots`` name the images (``certbench.nets.batch_invariance``; default: their
    positions), so that an image's loss is bitwise the same in any batch."""

    def __call__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        noise: torch.Tensor | None,
        slots: RowSlots | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def forward(model: nn.Module, inputs: torch.Tensor, slots: RowSlots | None = None) -> torch.Tensor:
    """``model(inputs)`` in fixed-shape chunks keyed by ``slots`` (default: the rows' positions;
    ``certbench.nets.batch_invariance``): records are bitwise identical for any batch size and
    sharding."""
    slots = slots if slots is not None else RowSlots.of(range(len(inputs)), inputs.device)
    return slots.forward(model, inputs)


def base_objective(model: nn.Module) -> Objective:
    """Cross-entropy of the base classifier (Wang et al., NeurIPS 2022 ML Safety Workshop, eq. 1)
    and its prediction."""

    def objective(
        images: torch.Tensor,
        labels: torch.Tensor,
        noise: torch.Tensor | None,
        slots: RowSlots | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = forward(model, images, slots)
        return F.cross_entropy(logits, labels, reduction="none"), logits.argmax(1)

    return objective


def smoothed_objective(model: nn.Module) -> Objective:
    """SmoothAdv's loss: cross-entropy of the Monte-Carlo soft smoothed classifier over the
    image's fixed noise vectors ``noise`` (B, m, C, H, W); its prediction is the soft argmax.
    Noisy copy j of the image with key k has key k·m + j."""

    def objective(
        images: torch.Tensor,
        labels: torch.Tensor,
        noise: torch.Tensor | None,
        slots: RowSlots | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if noise is None:
            raise ThreatModelError("the smoothed objective needs noise vectors per image.")
        b, m = noise.shape[:2]
        noisy = (images[:, None] + noise).flatten(0, 1)
        keys = slots.keys if slots is not None else torch.arange(b)
        copies = RowSlots.of((keys[:, None] * m + torch.arange(m)).flatten(), images.device)
        probs = F.softmax(forward(model, noisy, copies), dim=1).view(b, m, -1).mean(dim=1)
        picked = probs.gather(1, labels[:, None])[:, 0]
        return -torch.log(picked.clamp_min(torch.finfo(probs.dtype).tiny)), probs.argmax(1)

    return objective


def smoothing_noise(
    seed: int,
    wset: WeatherSet,
    indices: torch.Tensor,
    samples: int,
    sigma: float,
    shape: Sequence[int],
) -> torch.Tensor:
    """The attack's fixed noise vectors (B, m, *shape) per image, CPU float32, from streams
    keyed by (seed, weather, severity, index) only."""
    out = torch.empty(len(indices), samples, *shape)
    keys = ("weather-smoothadv", wset.weather, wset.severity)
    for row, index in enumerate(indices.tolist()):
        gen = seeded_generator(derive_seed(seed, *keys, int(index)))
        out[row] = torch.randn(samples, *shape, generator=gen) * sigma
    return out
