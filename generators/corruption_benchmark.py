"""What a corruption benchmark is (CIFAR-C, CIFAR-C-bar, weather): its corruptions, how one is
applied and its dataset-card text. Its own module so that each family's module (e.g.
``generators.weather``) can describe itself without importing the registry of families
(``generators.corruption_sets``), which imports every family."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ApplyFn = Callable[[np.ndarray, str, int, int, np.ndarray], np.ndarray]
"""(uint8 NHWC images, corruption, level, seed, source indices) -> uint8 NHWC images."""


@dataclass(frozen=True)
class CorruptionBenchmark:
    """What a corruption benchmark is: its corruptions, how to apply one, and its card text."""

    key: str
    suffix: str  # CIFAR-10 + suffix, e.g. "-C"
    names: tuple[str, ...]
    apply: ApplyFn  # (uint8 NHWC images, corruption, level, seed, source indices) -> uint8
    severity_value: Callable[[str, int], float]
    protocol: str  # markdown: the definitions, constants and equivalents
    citation: str
    tags: tuple[str, ...] = ()
    config_metadata: Callable[[str], dict[str, str]] = lambda name: {}
    """Extra checksum metadata of one corruption's configs (e.g. which frost textures)."""
