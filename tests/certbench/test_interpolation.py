"""Fourier amplitude/phase and pixel interpolation paths, and seeded pair selection (Fridovich-Keil
et al., NeurIPS 2022, §3).

The end-point checks compare against an independent numpy construction written the way the
released RobustNets code builds its window (``fftshift``, then the centred square slice
``[c−b, c+b]``), so the mask convention is checked as well as the interpolation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from certbench.errors import LensError
from certbench.lens.interpolation import (
    amplitude_path,
    between_class_pairs,
    denormalise,
    fourier_pairs,
    low_frequency_half_width,
    low_frequency_mask,
    normalise,
    path_lambdas,
    phase_path,
    pixel_path,
    within_class_pairs,
)


def end_points(size: int = 32, count: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    z0 = torch.randn((count, 3, size, size), generator=g, dtype=torch.float64) + 0.3
    z1 = torch.randn((count, 3, size, size), generator=g, dtype=torch.float64) - 0.7
    return z0, z1


def released_style(z0: np.ndarray, z1: np.ndarray, b: int, lam: float, part: str) -> np.ndarray:
    """Image at λ, window as the released ``low_freq_mutate``: centred slice [c−b, c+b]."""
    f0, f1 = np.fft.fft2(z0), np.fft.fft2(z1)
    a0, p0, a1, p1 = np.abs(f0), np.angle(f0), np.abs(f1), np.angle(f1)
    c = z0.shape[-1] // 2
    window = (..., slice(c - b, c + b + 1), slice(c - b, c + b + 1))
    source, target = (a0, a1) if part == "amplitude" else (p0, p1)
    mixed = np.fft.fftshift(source, axes=(-2, -1)).copy()
    shifted_target = np.fft.fftshift(target, axes=(-2, -1))
    mixed[window] = (1 - lam) * mixed[window] + lam * shifted_target[window]
    mixed = np.fft.ifftshift(mixed, axes=(-2, -1))
    spectrum = mixed * np.exp(1j * p0) if part == "amplitude" else a0 * np.exp(1j * mixed)
    return np.real(np.fft.ifft2(spectrum))


def test_lowest_40_percent_is_the_13_by_13_centred_block_on_cifar():
    assert low_frequency_half_width(32, 0.4) == 6
    mask = low_frequency_mask(32, 32, 0.4)
    assert int(mask.sum()) == 13 * 13
    assert bool(mask[0, 0]) and bool(mask[6, -6]) and not bool(mask[7, 0])
    assert bool(low_frequency_mask(32, 32, 1.0).all())
    with pytest.raises(LensError, match="low_frequency_fraction"):
        low_frequency_mask(32, 32, 0.0)


def test_lambdas_are_100_evenly_spaced_from_0_to_1():
    lam = path_lambdas(100)
    assert lam[0] == 0.0 and lam[-1] == 1.0 and len(lam) == 100
    assert torch.allclose(lam.diff(), torch.full((99,), 1 / 99, dtype=torch.float64))


@pytest.mark.parametrize("part", ["amplitude", "phase"])
def test_path_end_points_are_x0_and_the_mixed_spectrum(part):
    z0, z1 = end_points()
    build = amplitude_path if part == "amplitude" else phase_path
    path = build(z0, z1, path_lambdas(100), 0.4)
    assert path.shape == (2, 100, 3, 32, 32) and path.dtype == torch.float64
    assert torch.allclose(path[:, 0], z0, rtol=0, atol=1e-12)
    for k in (33, 99):
        expected = released_style(z0.numpy(), z1.numpy(), 6, k / 99, part)
        np.testing.assert_allclose(path[:, k].numpy(), expected, rtol=0, atol=1e-12)
    assert not torch.allclose(path[:, -1], z0, atol=1e-3)


def test_amplitude_path_keeps_phase_and_high_frequency_amplitude():
    z0, z1 = end_points()
    path = amplitude_path(z0, z1, path_lambdas(5), 0.4)
    f0 = torch.fft.fft2(z0)
    outside = ~low_frequency_mask(32, 32, 0.4)
    for k in range(5):
        fk = torch.fft.fft2(path[:, k])
        assert torch.allclose(fk.abs()[..., outside], f0.abs()[..., outside], atol=1e-9)
        strong = f0.abs() > 1e-6
        phase_diff = torch.angle(fk * f0.conj())[strong]
        assert float(phase_diff.abs().max()) < 1e-9


def test_pixel_path_takes_unit_steps_from_x0_towards_x1():
    z0, z1 = end_points(size=8, count=1)
    path = pixel_path(z0[0], z1[0], step=1.0)
    distance = float((z1[0] - z0[0]).norm())
    assert len(path) == math.ceil(distance)
    assert torch.equal(path[0], z0[0])
    steps = (path[1:] - path[:-1]).flatten(1).norm(dim=1)
    assert torch.allclose(steps, torch.ones_like(steps))
    assert float((z1[0] - path[-1]).norm()) <= 1.0 + 1e-9


def test_normalise_round_trips_and_checks_channels():
    x = torch.rand(4, 3, 8, 8, dtype=torch.float64)
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    z = normalise(x, mean, std)
    assert torch.allclose(z[:, 1], (x[:, 1] - 0.4) / 0.25)
    assert torch.allclose(denormalise(z, mean, std), x)
    with pytest.raises(LensError, match="manifest preprocessing"):
        normalise(x, [0.5], [0.2])


def test_fourier_pairs_are_distinct_seeded_and_prefix_stable():
    pairs = fourier_pairs(100, 50, seed=3)
    assert sorted(pairs.ravel().tolist()) == list(range(100))
    assert np.array_equal(fourier_pairs(100, 7, seed=3), pairs[:7])
    assert not np.array_equal(fourier_pairs(100, 7, seed=4), pairs[:7])
    with pytest.raises(LensError, match="paths=51"):
        fourier_pairs(100, 51, seed=3)


def test_pixel_pairs_respect_classes():
    labels = np.repeat(np.arange(3), 6)
    np.random.default_rng(0).shuffle(labels)
    within = within_class_pairs(labels, 3, seed=0)
    assert within.shape == (9, 2)
    assert np.array_equal(labels[within[:, 0]], labels[within[:, 1]])
    assert np.array_equal(labels[within[:, 0]], np.repeat(np.arange(3), 3))
    assert all(len(set(within[labels[within[:, 0]] == c].ravel())) == 6 for c in range(3))
    between = between_class_pairs(labels, 4, seed=0)
    assert between.shape == (12, 2)
    classes = [(int(labels[a]), int(labels[b])) for a, b in between]
    assert classes == [(0, 1)] * 4 + [(0, 2)] * 4 + [(1, 2)] * 4
    with pytest.raises(LensError, match="pixel_pairs=4"):
        within_class_pairs(labels, 4, seed=0)
