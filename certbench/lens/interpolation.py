"""Interpolating image paths of the Fourier lens: Fourier amplitude/phase and pixel-space paths.

Fridovich-Keil, Bartoldson, Diffenderfer, Kailkhura & Bremer, "Models Out of Line: A Fourier Lens
on Distribution Shift Robustness", NeurIPS 2022 (§3), and for the pixel paths
Fridovich-Keil, Gontijo Lopes & Roelofs, "Spectral bias in practice", 2021 (arXiv:2110.02424).
Constants and conventions are checked against the released code, github.com/sarafridov/RobustNets
(``fourier_interpolation.py`` and ``pixel_interpolation.py``); where paper and code differ, both
are named below and the choice is explained.

The functions take end points in any image space. The paper ("normalizing each pixel by the
training mean and standard deviation") and the released code build paths in their normalised
space z = (x − mean)/std; :mod:`certbench.lens.lens` builds them in the pixel space [0, 1] that
every entry shares, because an entry's normalisation is whatever it declares (issue: a declared
std must not change a figure). The two are close: scaling by 1/std commutes with every
operation here (Fourier paths are the same images, rescaled), and the mean matters only through
the DC bin; pixel paths step a fixed ℓ2 distance, so their step is given in pixel units.
Nothing is clipped.

Pair selection is seeded and sharding-free: which images form pair k depends only on (seed,
labels, k), never on how many pairs a caller asks for or in which order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from certbench.errors import LensError
from certbench.smoothing import derive_seed

LOW_FREQUENCY_FRACTION = 0.4
"""Share of each axis's frequencies interpolated on CIFAR-10, for amplitude and phase (§3)."""


# --------------------------------------------------------------------------- Fourier paths


def low_frequency_half_width(size: int, fraction: float = LOW_FREQUENCY_FRACTION) -> int:
    """b = ⌊(fraction / 2)·size⌋: the interpolated offsets are −b … b on an axis of ``size``.

    The paper says "we interpolate the lowest 40 % of image frequencies" (§3). The released code
    (``low_freq_mutate`` called with ``window_size=0.2``) replaces the centred square
    ``[c−b, c+b]²`` of the ``fftshift``-ed spectrum with b = ⌊0.2·min(H, W)⌋ and notes that
    ``window_size=0.5`` interpolates every frequency. So "lowest 40 %" means: along each axis,
    the 2b + 1 offsets closest to DC, a (2b+1)/size ≈ 40 % share of that axis (b = 6, a 13 × 13
    block of the 32 × 32 CIFAR spectrum: 13/32 = 40.6 % per axis, 169/1024 = 16.5 % of the
    bins). We follow the code: a square (ℓ∞) window, not a disc.
    """
    if not 0 < fraction <= 1:
        raise LensError(
            f"low_frequency_fraction must be in (0, 1], got {fraction!r}; "
            "0.4 is the paper's value for CIFAR-10, 1.0 interpolates every frequency"
        )
    return math.floor(fraction / 2 * size + 1e-9)


def low_frequency_mask(
    height: int, width: int, fraction: float = LOW_FREQUENCY_FRACTION
) -> torch.Tensor:
    """Boolean (H, W) mask in *unshifted* ``fft2`` layout: |u| ≤ b and |v| ≤ b (see above).

    Offsets are signed DFT frequencies (``fftfreq`` times the size); the window is symmetric
    under k → −k, so it never breaks the Hermitian symmetry of a real image's spectrum.
    """
    b = low_frequency_half_width(min(height, width), fraction)
    u = torch.fft.fftfreq(height, d=1.0 / height).abs()
    v = torch.fft.fftfreq(width, d=1.0 / width).abs()
    return (u[:, None] <= b) & (v[None, :] <= b)


def path_lambdas(steps: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """λ_k = k / (steps − 1), k = 0 … steps−1: 100 evenly spaced values from x₀ (λ = 0) to x₁.

    The released code iterates ``L`` over ``reversed(linspace(0, 1, 100))`` with weight ``L`` on
    the source, i.e. λ = 1 − L: the same grid in the same order.
    """
    if steps < 2:
        raise LensError(f"steps must be >= 2 (a path needs both end points), got {steps}")
    return torch.linspace(0.0, 1.0, steps, dtype=dtype)


def _spectra(z0: torch.Tensor, z1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if z0.shape != z1.shape or z0.ndim != 4:
        raise LensError(
            f"path end points must both have shape (P, C, H, W), got {tuple(z0.shape)} and "
            f"{tuple(z1.shape)}"
        )
    return torch.fft.fft2(z0.to(torch.float64)), torch.fft.fft2(z1.to(torch.float64))


def _mix(
    first: torch.Tensor, second: torch.Tensor, lambdas: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """(P, S, C, H, W): (1 − λ)·first + λ·second inside the mask, ``first`` outside.

    Written as (1 − λ)·a + λ·b, not a + λ·(b − a), so both end points are bit-exact.
    """
    lam = lambdas.to(first.device, first.dtype).view(1, -1, 1, 1, 1)
    mixed = (1 - lam) * first[:, None] + lam * second[:, None]
    return torch.where(mask.to(first.device), mixed, first[:, None])


def amplitude_path(
    z0: torch.Tensor,
    z1: torch.Tensor,
    lambdas: torch.Tensor,
    fraction: float = LOW_FREQUENCY_FRACTION,
) -> torch.Tensor:
    """Fourier-amplitude paths (P, S, C, H, W), float64, from end points (P, C, H, W).

    Per channel, F_i = DFT₂(z_i) = a_i·e^{i p_i}. Image λ keeps x₀'s phase p₀ everywhere and
    x₀'s amplitude outside the low-frequency window, and uses (1 − λ)·a₀ + λ·a₁ inside it; the
    image is Re(IDFT₂(a_λ·e^{i p₀})). λ = 0 gives z₀ (to FFT round-off), λ = 1 the mixed
    spectrum (a₁ inside the window, a₀ outside, phase p₀). The real part is what the released
    code keeps (``np.real``); here the imaginary part is round-off only, because amplitudes and
    the window are symmetric under k → −k.
    """
    f0, f1 = _spectra(z0, z1)
    height, width = z0.shape[-2:]
    mask = low_frequency_mask(height, width, fraction)
    amplitude = _mix(f0.abs(), f1.abs(), lambdas, mask)
    phase = torch.angle(f0)[:, None]
    return torch.fft.ifft2(torch.polar(amplitude, phase.expand_as(amplitude))).real


def phase_path(
    z0: torch.Tensor,
    z1: torch.Tensor,
    lambdas: torch.Tensor,
    fraction: float = LOW_FREQUENCY_FRACTION,
) -> torch.Tensor:
    """Fourier-phase paths (P, S, C, H, W), float64: x₀'s amplitude, low phases interpolated.

    Phases are the principal values p ∈ (−π, π] (``angle``) and are interpolated linearly as
    numbers, (1 − λ)·p₀ + λ·p₁, not along the shorter arc: this is the paper's formula and the
    released code's. Antisymmetry p(−k) = −p(k) survives except at the DC bin, whose phase is 0
    or π (sign of the channel's mean): between those the DC term turns complex, and taking the
    real part (as the released code does) shrinks the channel mean through 0 to its new sign.
    """
    f0, f1 = _spectra(z0, z1)
    height, width = z0.shape[-2:]
    mask = low_frequency_mask(height, width, fraction)
    phase = _mix(torch.angle(f0), torch.angle(f1), lambdas, mask)
    amplitude = f0.abs()[:, None].expand_as(phase)
    return torch.fft.ifft2(torch.polar(amplitude.contiguous(), phase)).real


# --------------------------------------------------------------------------- pixel paths


def pixel_path_length(distance: float, step: float) -> int:
    """Images on a pixel path: t = 0, step, 2·step, … < distance (``np.arange``), at least 1."""
    return max(1, math.ceil(distance / step - 1e-12))


def pixel_path(z0: torch.Tensor, z1: torch.Tensor, step: float = 1.0) -> torch.Tensor:
    """(L, C, H, W) float64 points z₀ + t·(z₁ − z₀)/‖z₁ − z₀‖₂ for t = 0, step, … < ‖z₁ − z₀‖₂.

    As in Fridovich-Keil et al.'s released ``pixel_interpolation.py``: a fixed ℓ2 step rather
    than a fixed number of images, so the path length grows with the distance (≈ 40–80 images
    for CIFAR-10) and x₁ itself is not on the path. The released code steps 1.0 in its
    normalised units; the lens steps in pixel units (0.25 by default, the same for every entry
    whatever its declared std), see :data:`certbench.lens.lens.PIXEL_STEP`.
    """
    if step <= 0:
        raise LensError(f"pixel_step must be > 0, got {step!r}")
    a, b = z0.to(torch.float64), z1.to(torch.float64)
    direction = b - a
    distance = float(direction.norm())
    count = pixel_path_length(distance, step)
    t = torch.arange(count, dtype=torch.float64, device=a.device) * step
    unit = direction / distance if distance > 0 else direction
    return a[None] + t.view(-1, 1, 1, 1) * unit[None]


# --------------------------------------------------------------------------- pair selection


def fourier_pairs(count: int, paths: int, seed: int) -> np.ndarray:
    """(paths, 2) positions of (x₀, x₁) for Fourier paths 0 … paths−1; all 2·paths distinct.

    The released code draws ``np.random.choice(n, size=(m, 2), replace=False)``: 2m distinct
    test images (with m = 5,000 and n = 10,000, every image once). We take a seeded permutation
    of the test set and pair consecutive entries, the same distribution; pair k depends only on
    (seed, count, k), so any range of paths can be computed alone.
    """
    if paths < 1 or 2 * paths > count:
        raise LensError(
            f"paths={paths} needs 2·paths distinct images but the test set has {count}; "
            f"use at most {count // 2} paths (the paper uses 5,000 on the 10,000 CIFAR-10 images)"
        )
    rng = np.random.default_rng(derive_seed(seed, "fourier-lens", "pairs"))
    return rng.permutation(count)[: 2 * paths].reshape(paths, 2)


def _class_positions(labels: np.ndarray) -> dict[int, np.ndarray]:
    return {int(c): np.flatnonzero(labels == c) for c in np.unique(labels)}


def within_class_pairs(labels: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    """(classes·per_class, 2) positions: per class (ascending), ``per_class`` pairs of distinct
    images of that class (the released code's m = 200, without replacement)."""
    out = []
    for c, positions in _class_positions(labels).items():
        if 2 * per_class > len(positions):
            raise LensError(
                f"pixel_pairs={per_class} within-class pairs need {2 * per_class} images of "
                f"class {c}, which has {len(positions)}; lower pixel_pairs (or leave "
                "pixel_within out of --kind)"
            )
        rng = np.random.default_rng(derive_seed(seed, "fourier-lens", "pixel-within", c))
        out.append(positions[rng.permutation(len(positions))[: 2 * per_class]].reshape(-1, 2))
    return np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)


def between_class_pairs(labels: np.ndarray, per_pair: int, seed: int) -> np.ndarray:
    """(C(C−1)/2·per_pair, 2) positions: for each class pair i < j (lexicographic), x₀ from
    class i and x₁ from class j, ``per_pair`` pairs, distinct images on each side."""
    groups = _class_positions(labels)
    classes = sorted(groups)
    out = []
    for k, i in enumerate(classes):
        for j in classes[k + 1 :]:
            a, b = groups[i], groups[j]
            if per_pair > min(len(a), len(b)):
                raise LensError(
                    f"pixel_pairs={per_pair} between-class pairs of classes {i} and {j} need "
                    f"{per_pair} images of each, they have {len(a)} and {len(b)}; lower "
                    "pixel_pairs"
                )
            rng = np.random.default_rng(derive_seed(seed, "fourier-lens", "pixel-between", i, j))
            first = a[rng.permutation(len(a))[:per_pair]]
            second = b[rng.permutation(len(b))[:per_pair]]
            out.append(np.stack([first, second], axis=1))
    return np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)


def normalise(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """z = (x − mean)/std per channel, float64; x are pixels in [0, 1], shape (N, C, H, W)."""
    m, s = _stats(mean, std, x)
    return (x.to(torch.float64) - m) / s


def denormalise(z: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """x = z·std + mean per channel (inverse of :func:`normalise`), float64, channels at −3."""
    m, s = _stats(mean, std, z)
    return z * s + m


def _stats(
    mean: Sequence[float], std: Sequence[float], like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    channels = like.shape[-3]
    if len(mean) != channels or len(std) != channels or any(v <= 0 for v in std):
        raise LensError(
            f"mean {list(mean)} and std {list(std)} need {channels} values each (std > 0): "
            "pass the entry's manifest preprocessing"
        )
    shape = (channels, 1, 1)
    m = torch.tensor(list(mean), dtype=torch.float64, device=like.device).view(shape)
    s = torch.tensor(list(std), dtype=torch.float64, device=like.device).view(shape)
    return m, s
