"""Per-image random streams for augmentations: explicit seeds, validated and derived.

Every augmentation takes one seed per image, so a batch is the same as its images augmented one
by one and the result never depends on batch size, DataLoader workers or shuffling. Training
derives each seed from (run seed, epoch, image index, view) with
:func:`certbench.smoothing.derive_seed`, the same derivation certification uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from certbench.errors import AugmentationError
from certbench.smoothing import derive_seed

__all__ = ["MAX_SEED", "check_seeds", "sub_seeds"]

MAX_SEED = 2**64 - 1
"""Largest seed accepted (``derive_seed`` returns 64-bit values)."""


def check_seeds(seeds: Sequence[int] | torch.Tensor, count: int) -> list[int]:
    """``seeds`` as a list of ``count`` Python ints in [0, 2**64); raises AugmentationError."""
    values = seeds.tolist() if isinstance(seeds, torch.Tensor) else list(seeds)
    if len(values) != count:
        raise AugmentationError(
            f"got {len(values)} seeds for {count} images; pass exactly one seed per image"
        )
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
            raise AugmentationError(
                f"seeds must be integers in [0, 2**64), got {value!r}; derive them with "
                "certbench.smoothing.derive_seed"
            )
        out.append(value)
    return out


def sub_seeds(seed: int, count: int) -> list[int]:
    """``count`` per-image seeds derived from one call seed: ``derive_seed(seed, i)``."""
    return [derive_seed(seed, i) for i in range(count)]
