"""Tiny written-by-the-test CIFAR sources for the CIFAR-F and Hub tests (no downloads).

Images have a 1/f amplitude spectrum, like natural images, so the clip(|F|, 20, 200) term of
CIFAR-F behaves as on real CIFAR (large at low frequencies, clipped at 20 at high ones).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.data_layouts import (
    CIFAR10_CLASSES,
    CIFAR100_COARSE,
    CIFAR100_FINE,
    random_labels,
    write_hub_folder,
    write_torchvision_cifar,
)

__all__ = [
    "CIFAR10_CLASSES",
    "CIFAR100_COARSE",
    "CIFAR100_FINE",
    "natural_images",
    "write_cifar10",
    "write_cifar100",
    "write_hub_folder",
]


def natural_images(n: int, *, seed: int = 0, size: int = 32) -> np.ndarray:
    """uint8 (n, 3, size, size) images with a 1/f spectrum around mid-grey."""
    rng = np.random.default_rng(seed)
    f = np.fft.fftfreq(size)
    radius = np.hypot(f[:, None], f[None, :])
    radius[0, 0] = 1.0
    shape = (n, 3, size, size)
    spectrum = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) / radius
    x = np.real(np.fft.ifft2(spectrum))
    x = (x - x.mean(axis=(1, 2, 3), keepdims=True)) / x.std(axis=(1, 2, 3), keepdims=True)
    return (np.clip(0.5 + 0.18 * x, 0, 1) * 255).round().astype(np.uint8)


def write_cifar10(root: Path, n: int = 24, *, seed: int = 0, size: int = 32) -> Path:
    """A torchvision ``cifar-10-batches-py`` test split of ``n`` images under ``root``."""
    write_torchvision_cifar(
        root, "cifar10", natural_images(n, seed=seed, size=size), random_labels(n, 10, seed=seed)
    )
    return root


def write_cifar100(root: Path, n: int = 12, *, seed: int = 0) -> Path:
    """A torchvision ``cifar-100-python`` test split of ``n`` images under ``root``."""
    write_torchvision_cifar(
        root,
        "cifar100",
        natural_images(n, seed=seed),
        random_labels(n, 100, seed=seed),
        coarse_labels=random_labels(n, 20, seed=seed + 7),
    )
    return root
