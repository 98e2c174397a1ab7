"""The standard CIFAR training augmentation: random crop with zero padding, horizontal flip.

``RandomCrop(32, padding=4)`` then ``RandomHorizontalFlip()`` is the base augmentation of every
recipe in Cohen et al. (2019), Jeong & Shin (2020) and the release of Sun et al. (ECCV 2022) (all
inherit Cohen et al.'s ``datasets.py``). Here each image draws its crop offset and flip from its own
seed, so a batch equals its images processed one by one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from certbench.augment.seeds import check_seeds
from certbench.errors import AugmentationError

__all__ = ["PADDING", "crop_flip"]

PADDING = 4
"""Zero padding on each side before the random crop (Cohen et al.'s CIFAR transform)."""


def crop_flip(
    images: torch.Tensor, seeds: Sequence[int], *, padding: int = PADDING
) -> torch.Tensor:
    """Random ``H×W`` crop of the zero-padded image, then a horizontal flip with probability 1/2.

    ``images`` is ``(B, C, H, W)`` of any dtype; the result has the same shape and dtype. Image
    ``i`` draws (row offset, column offset, flip) from ``default_rng(seeds[i])``.
    """
    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        raise AugmentationError(
            f"images must be a tensor (B, C, H, W), got {getattr(images, 'shape', images)!r}"
        )
    if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
        raise AugmentationError(f"padding must be an integer >= 0, got {padding!r}")
    seeds = check_seeds(seeds, images.shape[0])
    h, w = images.shape[-2:]
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    out = torch.empty_like(images)
    for i, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)
        top, left = (int(v) for v in rng.integers(0, 2 * padding + 1, size=2))
        crop = padded[i, :, top : top + h, left : left + w]
        out[i] = crop.flip(-1) if rng.random() < 0.5 else crop
    return out
