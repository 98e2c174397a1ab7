"""Random streams for augmentation and training noise: explicit 64-bit seeds, used in full.

Every augmentation takes one seed per image, so a batch is the same as its images augmented one
by one and the result never depends on batch size, DataLoader workers or shuffling. Training
derives each seed from (run seed, epoch, image index, view) with
:func:`certbench.smoothing.streams.derive_seed`, the same derivation certification uses.

:class:`RandomStream` turns one 64-bit seed into draws on a device without losing seed bits:
on the CPU numpy's PCG64 (seeded through SeedSequence, all bits used) — torch's CPU
``manual_seed`` keeps only the low 32 bits, so millions of per-image seeds would collide by the
birthday bound; on CUDA torch's Philox generator, whose ``manual_seed`` keeps all 64 bits.
CPU and CUDA draws therefore differ; each is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from certbench.errors import AugmentationError
from certbench.smoothing import derive_seed

__all__ = ["MAX_SEED", "RandomStream", "check_seeds", "sub_seeds"]

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
                "certbench.smoothing.streams.derive_seed"
            )
        out.append(value)
    return out


def sub_seeds(seed: int, count: int) -> list[int]:
    """``count`` per-image seeds derived from one call seed: ``derive_seed(seed, i)``."""
    return [derive_seed(seed, i) for i in range(count)]


class RandomStream:
    """Uniform and normal float32 draws on ``device`` from one 64-bit ``seed`` (see above).

    ``salt`` selects an independent sub-stream of the same seed on the CPU (numpy entropy
    ``[seed, salt]``), so one seed can drive several kinds of draws.
    """

    def __init__(self, seed: int, device: torch.device | str = "cpu", *, salt: int = 0) -> None:
        check_seeds([seed], 1)
        self.device = torch.device(device)
        if self.device.type == "cpu":
            self._rng: np.random.Generator | None = np.random.default_rng([seed, salt])
            self._generator: torch.Generator | None = None
        else:
            self._rng = None
            self._generator = torch.Generator(device=self.device)
            mixed = (seed ^ (salt * 0x9E3779B97F4A7C15)) & MAX_SEED
            self._generator.manual_seed(mixed)

    def uniform(self, shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
        """U(0, 1) float32 of ``shape``."""
        if self._rng is not None:
            return torch.from_numpy(self._rng.random(tuple(shape), dtype=np.float32))
        return torch.rand(tuple(shape), generator=self._generator, device=self.device)

    def normal(self, shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
        """N(0, 1) float32 of ``shape``."""
        if self._rng is not None:
            return torch.from_numpy(self._rng.standard_normal(tuple(shape), dtype=np.float32))
        return torch.randn(tuple(shape), generator=self._generator, device=self.device)
