"""What a corruption is and how it runs reproducibly, for every corruption benchmark.

A :class:`Corruption` holds its five severity constants, an optional per-image ``sample`` step
(the original's random draws) and the deterministic batched ``apply``. Each image draws from its
own stream derived from (seed, family, corruption, severity, image index), so the output is
independent of batch size and any image can be regenerated alone. Shared by CIFAR-C
(``generators.corruptions_c``), CIFAR-C-bar (``generators.corruptions_cbar``) and the weather
sets (``generators.weather``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from certbench.errors import GeneratorError

IMAGE_SIZE = 32
SEVERITIES = (1, 2, 3, 4, 5)
Params = dict[str, np.ndarray]


@dataclass(frozen=True)
class Corruption:
    """One corruption: severity constants, per-image random draws, and the batched transform."""

    name: str
    constants: tuple[Any, ...]
    apply: Callable[[np.ndarray, Params, Any], np.ndarray]
    sample: Callable[[np.random.Generator, np.ndarray, Any], Params] | None = None


def name_word(text: str) -> int:
    """A stable non-negative integer for a name, used as SeedSequence entropy."""
    return zlib.crc32(text.encode("utf-8"))


def image_rngs(
    seed: int, family: str, name: str, level: int, indices: Sequence[int] | np.ndarray
) -> list[np.random.Generator]:
    """One generator per image, keyed by (seed, family, corruption, severity level, index)."""
    if seed < 0:
        raise GeneratorError(f"seed must be a non-negative integer, got {seed}.")
    base = [int(seed), name_word(family), name_word(name), int(level)]
    return [np.random.default_rng([*base, int(i)]) for i in np.asarray(indices).tolist()]


def stack_params(draws: Sequence[Params]) -> Params:
    """Stack per-image draws into batch arrays (every image draws the same shapes)."""
    if not draws:
        return {}
    return {key: np.stack([d[key] for d in draws]) for key in draws[0]}


def check_images(images: np.ndarray) -> np.ndarray:
    """Validate a uint8 (N, 32, 32, 3) batch, the only input the CIFAR constants are made for."""
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        raise GeneratorError(
            "images must be a uint8 numpy array (N, 32, 32, 3), got "
            f"{getattr(images, 'dtype', type(images))}."
        )
    if images.ndim != 4 or images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE, 3):
        raise GeneratorError(
            f"images must have shape (N, 32, 32, 3) (channels last), got {images.shape}; "
            "the CIFAR corruption constants are defined for 32x32 RGB images."
        )
    return images


def check_severity(name: str, severity: int, registry: dict[str, Corruption]) -> Corruption:
    """Look up a corruption and check its 1-based severity level."""
    if name not in registry:
        raise GeneratorError(
            f"corruption={name!r} is unknown; choose one of {', '.join(registry)}."
        )
    if severity not in SEVERITIES:
        raise GeneratorError(f"severity={severity!r} is invalid; use an integer 1..5.")
    return registry[name]


def run_corruption(
    images: np.ndarray,
    spec: Corruption,
    severity: int,
    *,
    seed: int,
    indices: Sequence[int] | np.ndarray,
    family: str,
) -> np.ndarray:
    """Draw each image's parameters from its own stream, then apply the batched transform."""
    images = check_images(images)
    indices = np.asarray(indices, dtype=np.int64)
    if indices.shape != (len(images),):
        raise GeneratorError(
            f"indices must have one entry per image ({len(images)}), got shape {indices.shape}."
        )
    constant = spec.constants[severity - 1]
    params: Params = {}
    if spec.sample is not None:
        rngs = image_rngs(seed, family, spec.name, severity, indices)
        params = stack_params(
            [spec.sample(rng, img, constant) for rng, img in zip(rngs, images, strict=True)]
        )
    out = spec.apply(images, params, constant)
    return np.ascontiguousarray(out, dtype=np.uint8)
