"""Per-epoch evaluation during training: clean accuracy and accuracy under one noise draw.

A cheap health signal for the training log, not a certificate: certified accuracy and ACR come
from ``certbench certify`` on the written model. The noise of each evaluation batch is seeded by
(run seed, batch start), so the figure of an epoch is reproducible.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from certbench.augment import RandomStream
from certbench.data import ImageSet
from certbench.smoothing import derive_seed

__all__ = ["autocast", "evaluate"]


def autocast(device: torch.device, amp: torch.dtype | None) -> AbstractContextManager[Any]:
    """``torch.autocast`` to ``amp`` on ``device``, or nothing when ``amp`` is None."""
    if amp is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=amp)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    images: ImageSet,
    *,
    sigma: float,
    seed: int,
    device: torch.device,
    amp: torch.dtype | None = None,
    batch_size: int = 500,
) -> dict[str, float]:
    """Clean accuracy and accuracy under one draw of N(0, σ²) noise per image; eval mode."""
    model.eval()
    correct_clean = correct_noisy = 0
    for start in range(0, len(images), batch_size):
        x = images.images[start : start + batch_size].to(device).float().div_(255.0)
        y = images.labels[start : start + batch_size].to(device)
        noise = RandomStream(derive_seed(seed, "eval", start), device).normal(x.shape).to(device)
        with autocast(device, amp):
            clean = model(x).argmax(dim=-1)
            noisy = model(x + sigma * noise).argmax(dim=-1)
        correct_clean += int((clean == y).sum())
        correct_noisy += int((noisy == y).sum())
    return {
        "eval_clean_accuracy": correct_clean / len(images),
        "eval_noisy_accuracy": correct_noisy / len(images),
    }
