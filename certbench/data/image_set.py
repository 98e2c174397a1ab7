"""A labelled test set in memory (:class:`ImageSet`) and the choice of its images (:class:`Subset`).

Every source ``certbench.data.sources`` reads becomes one validated :class:`ImageSet` (uint8
images, int64
labels, the position of each image in its source split, class names, metadata columns), so
certification, generators and the service never care where the pixels came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from certbench.errors import DataSourceError


@dataclass(frozen=True)
class Subset:
    """Which images of a split to use: every ``skip``-th image, then the first ``limit`` of those.

    ``Subset(skip=20)`` on a 10,000-image split gives the 500 images of the smoothing protocol
    (positions 0, 20, 40, ...), the same images Cohen et al.'s ``--skip 20`` certifies.
    """

    skip: int = 1
    limit: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.skip, bool) or not isinstance(self.skip, int) or self.skip < 1:
            raise DataSourceError(f"Subset.skip must be an integer >= 1, got {self.skip!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise DataSourceError(
                f"Subset.limit must be None (all) or an integer >= 1, got {self.limit!r}"
            )

    def positions(self, count: int) -> np.ndarray:
        """Positions (int64) selected among ``count`` rows, in increasing order."""
        return np.arange(0, count, self.skip, dtype=np.int64)[: self.limit]


@dataclass(frozen=True, eq=False)
class ImageSet:
    """A labelled test set held in memory, validated on construction.

    ``images`` are uint8 (N, 3, H, W); ``indices`` are the positions of the images in the source
    split (the ``source_index`` column when the source has one), so records of a subset or shard
    can always be traced back to the original image. ``extra`` holds the remaining per-image
    metadata columns (e.g. ``f_c``, ``alpha``, ``eps``, ``severity``, ``corruption``).
    """

    name: str
    images: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor
    class_names: tuple[str, ...]
    coarse_labels: torch.Tensor | None = None
    coarse_class_names: tuple[str, ...] | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        images = self.images
        if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
            raise DataSourceError(
                f"ImageSet {self.name!r}: images must be a uint8 tensor, got "
                f"{getattr(images, 'dtype', type(images).__name__)}"
            )
        if images.ndim != 4 or images.shape[1] != 3:
            raise DataSourceError(
                f"ImageSet {self.name!r}: images must have shape (N, 3, H, W), got "
                f"{tuple(images.shape)}"
            )
        object.__setattr__(self, "class_names", tuple(map(str, self.class_names)))
        if self.coarse_class_names is not None:
            object.__setattr__(self, "coarse_class_names", tuple(map(str, self.coarse_class_names)))
        count = images.shape[0]
        if count == 0:
            raise DataSourceError(f"ImageSet {self.name!r} has no images")
        _check_labels(self.name, "labels", self.labels, count, self.class_names)
        _check_vector(self.name, "indices", self.indices, count)
        if (self.coarse_labels is None) != (self.coarse_class_names is None):
            raise DataSourceError(
                f"ImageSet {self.name!r}: coarse_labels and coarse_class_names must be given "
                "together or not at all"
            )
        if self.coarse_labels is not None and self.coarse_class_names is not None:
            _check_labels(
                self.name, "coarse_labels", self.coarse_labels, count, self.coarse_class_names
            )
        for key, values in self.extra.items():
            if len(values) != count:
                raise DataSourceError(
                    f"ImageSet {self.name!r}: extra column {key!r} has {len(values)} values "
                    f"for {count} images"
                )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def as_float(self) -> torch.Tensor:
        """Images as float32 in [0, 1], the input scale of every certbench model."""
        return self.images.to(torch.float32).div_(255.0)


def _check_vector(name: str, what: str, values: Any, count: int) -> None:
    if not isinstance(values, torch.Tensor) or values.dtype != torch.int64 or values.ndim != 1:
        raise DataSourceError(
            f"ImageSet {name!r}: {what} must be a 1-D int64 tensor, got "
            f"{getattr(values, 'dtype', type(values).__name__)} "
            f"of shape {tuple(getattr(values, 'shape', ()))}"
        )
    if values.shape[0] != count:
        raise DataSourceError(
            f"ImageSet {name!r}: {values.shape[0]} {what} for {count} images; every image needs "
            f"exactly one"
        )


def _check_labels(
    name: str, what: str, labels: Any, count: int, class_names: Sequence[str]
) -> None:
    _check_vector(name, what, labels, count)
    if len(class_names) == 0:
        raise DataSourceError(f"ImageSet {name!r}: no class names for {what}")
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= len(class_names):
        raise DataSourceError(
            f"ImageSet {name!r}: {what} range from {low} to {high} but there are only "
            f"{len(class_names)} class names (valid labels 0..{len(class_names) - 1})"
        )


def selected_positions(subset: Subset, count: int, what: str) -> np.ndarray:
    positions = subset.positions(count)
    if len(positions) == 0:
        raise DataSourceError(
            f"{what} has {count} images, so {subset} selects none; use a non-empty split"
        )
    return positions
