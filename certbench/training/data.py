"""Training batches: shuffled per epoch, augmented image by image from derived seeds.

Every random choice about an image comes from a seed derived from (run seed, stream, epoch,
image index[, view]) with :func:`certbench.smoothing.streams.derive_seed`: its crop and flip, its
AugMix or FourierMix views. The epoch's order is a permutation seeded by (run seed, epoch). So a
run is reproducible whatever the number of DataLoader workers, and resuming at an epoch boundary
needs no RNG state. Image indices are the source positions (``ImageSet.indices``), so training on a
subset (``limit``) gives each image the same stream as in the full set.

The sampler yields ``(epoch, positions)`` keys and the dataset builds a whole batch per key
(batched fetch), so workers never hold per-epoch state. With ``gpu_views`` the FourierMix views
are left to the training loop (on the GPU): the batch then carries the cropped uint8 images and
the views' seeds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from certbench.augment import AugMixConfig, FourierMixConfig, augmix, crop_flip, fourier_mix
from certbench.errors import TrainingError
from certbench.smoothing import derive_seed
from certbench.training.recipes import Recipe

__all__ = ["EpochBatches", "TrainBatches", "make_views"]

BatchKey = tuple[int, list[int]]


class EpochBatches(Sampler[BatchKey]):
    """Keys ``(epoch, positions)`` for epochs ``start..end-1``: a seeded permutation, cut into
    full batches (the last partial batch is dropped, as in the release of Sun et al., ECCV 2022)."""

    def __init__(self, count: int, batch_size: int, *, seed: int, start: int, end: int) -> None:
        if batch_size < 1 or count < batch_size:
            raise TrainingError(
                f"batch size {batch_size} needs at least that many training images, have "
                f"{count}; lower --batch-size"
            )
        self.count, self.batch_size, self.seed = count, batch_size, seed
        self.start, self.end = start, end

    def steps_per_epoch(self) -> int:
        return self.count // self.batch_size

    def __len__(self) -> int:
        return max(0, self.end - self.start) * self.steps_per_epoch()

    def __iter__(self) -> Iterator[BatchKey]:
        for epoch in range(self.start, self.end):
            rng = np.random.default_rng(derive_seed(self.seed, "order", epoch))
            order = rng.permutation(self.count)
            for step in range(self.steps_per_epoch()):
                chunk = order[step * self.batch_size : (step + 1) * self.batch_size]
                yield epoch, [int(i) for i in chunk]


def make_views(
    recipe: Recipe,
    base: torch.Tensor,
    seeds: list[list[int]],
    *,
    augmix_config: AugMixConfig | None = None,
    fouriermix_config: FourierMixConfig | None = None,
) -> torch.Tensor:
    """Views ``(B, V, C, H, W)`` float in [0, 1] of the uint8 batch ``base`` on its device.

    ``seeds[v - 1]`` holds the per-image seeds of view ``v`` (view 0 is the image itself).
    """
    clean = base.to(torch.float32).div_(255.0)
    if recipe.views == "none":
        return clean[:, None]
    if recipe.views == "augmix":
        extra = [augmix(base.cpu(), s, augmix_config).to(base.device) for s in seeds]
    else:
        extra = [fourier_mix(clean, s, fouriermix_config) for s in seeds]
    return torch.stack([clean, *extra], dim=1)


class TrainBatches(Dataset[dict[str, Any]]):
    """Builds one training batch per ``(epoch, positions)`` key (see module docstring)."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        indices: torch.Tensor,
        recipe: Recipe,
        *,
        seed: int,
        gpu_views: bool = False,
        augmix_config: AugMixConfig | None = None,
        fouriermix_config: FourierMixConfig | None = None,
    ) -> None:
        if gpu_views and recipe.views != "fouriermix":
            raise TrainingError(
                f"GPU-side views exist for FourierMix only; recipe {recipe.name!r} makes its "
                "views in the DataLoader workers (drop --augment-device cuda)"
            )
        self.images, self.labels, self.indices = images, labels, indices
        self.recipe, self.seed, self.gpu_views = recipe, seed, gpu_views
        self.augmix_config, self.fouriermix_config = augmix_config, fouriermix_config

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def view_seeds(self, epoch: int, sources: list[int]) -> list[list[int]]:
        """Per-image seeds of the augmented views 1..V-1."""
        stream = self.recipe.views
        return [
            [derive_seed(self.seed, stream, epoch, i, view) for i in sources]
            for view in range(1, self.recipe.num_views)
        ]

    def __getitem__(self, key: BatchKey) -> dict[str, Any]:  # type: ignore[override]
        epoch, positions = key
        rows = torch.as_tensor(positions, dtype=torch.int64)
        sources = self.indices[rows].tolist()
        crop_seeds = [derive_seed(self.seed, "crop", epoch, i) for i in sources]
        base = crop_flip(self.images[rows], crop_seeds)
        seeds = self.view_seeds(epoch, sources)
        batch: dict[str, Any] = {"epoch": epoch, "labels": self.labels[rows]}
        if self.gpu_views:
            batch.update(base=base, seeds=seeds)
        else:
            batch["views"] = make_views(
                self.recipe,
                base,
                seeds,
                augmix_config=self.augmix_config,
                fouriermix_config=self.fouriermix_config,
            )
        return batch
