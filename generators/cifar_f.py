"""CIFAR-10-F / CIFAR-100-F: power-law Fourier corruptions (Sun et al., ECCV 2022, §5, Fig. 12).

Each test set perturbs every test image by noise whose spectrum peaks at a centre frequency
``f_c`` and decays as ``1 / (|f - f_c| + 1) ** alpha`` (DESIGN.md §4), scaled to an ℓ2 norm
``eps`` ∈ {8, 10, 12} (severities 1..3): 4 α × 16 f_c × 3 ε = 192 test sets.

Two protocols:

- ``paper`` implements the equations: centred spectrum with DC at (16, 16), amplitude
  ``clip(|F|, 20, 200) / (|f - f_c| + 1)^α · U(0.8, 1.2)``, phase ``U(0, 2π)``, the noise made
  Hermitian so its inverse FFT is real, ``x_F = x + γ·IFFT(δ)`` with ``γ = ε / ‖IFFT(δ)‖₂``,
  then clip to [0, 1] and round to uint8.
- ``reference`` reproduces what the released ``generate_fft.py`` computed (needed to reproduce
  published numbers): mask centred at (15, 15) with its sub-pixel ring rule, one phase per
  column drawn as ``uniform(3, 32)·2π``, ``|IFFT|``, clip, rescale ``x_r - x`` to ε, no final
  clip, truncating uint8. The released code applied ``fftshift`` to *all* axes (channels too);
  that only permutes which channel each amplitude draw lands on, and
  :func:`reference_perturb` keeps that permutation so injected draws mean the same thing.

Randomness is seeded and counter-based (:mod:`generators.streams`): every image's draws derive
from (seed, dataset, test set, source index), so output is byte-identical for any batch size,
limit or shard. Draws are separate from the arithmetic (``draw_*`` vs ``*_perturb``) so tests
can inject them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import torch

from certbench.errors import GeneratorError
from certbench.fourier import hermitian_rfft_columns, radial_frequency, rfft_frequency
from generators import streams

ALPHAS: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)
EXTRA_ALPHAS: tuple[float, ...] = (0.1, 0.3)  # also present in the released code
FCS: tuple[int, ...] = tuple(range(1, 17))
EPS_BY_SEVERITY: dict[int, float] = {1: 8.0, 2: 10.0, 3: 12.0}
SEVERITIES: tuple[int, ...] = tuple(EPS_BY_SEVERITY)
AMPLITUDE_CLIP = (20.0, 200.0)  # P(f) = clip(|F(x)|, a_lower, a_upper)
AMPLITUDE_JITTER = (0.8, 1.2)  # U(1 - b, 1 + b) with b = 0.2
REFERENCE_CENTRE = 15.0  # released mask centre (DC of a centred 32x32 spectrum is at 16)
REFERENCE_PHASE_LOW_HIGH = (3.0, 32.0)  # np.random.uniform(3, 32, 32): low, high, size=32
SIZE = 32
NUM_CLASSES = {"cifar10": 10, "cifar100": 100}
GENERATOR_VERSION = 1


class Protocol(StrEnum):
    """Which CIFAR-F algorithm to run (see module docstring)."""

    PAPER = "paper"
    REFERENCE = "reference"


# --------------------------------------------------------------------------------------------
# test-set grid and names


def alpha_token(alpha: float) -> str:
    """Config-name token of α without dots: 2 -> '2', 0.5 -> '0p5', 0.1 -> '0p1'."""
    text = f"{alpha:g}"
    return text.replace(".", "p")


@dataclass(frozen=True)
class CifarFSpec:
    """One CIFAR-F test set: centre frequency, power-law exponent and severity."""

    f_c: int
    alpha: float
    severity: int

    @property
    def eps(self) -> float:
        return EPS_BY_SEVERITY[self.severity]

    @property
    def name(self) -> str:
        """Config name, e.g. ``fc05_a2_s3`` (no dots, sortable by f_c)."""
        return f"fc{self.f_c:02d}_a{alpha_token(self.alpha)}_s{self.severity}"


def _check_values(what: str, values: Iterable[Any], allowed: Sequence[Any], flag: str) -> list[Any]:
    chosen = list(values)
    if not chosen:
        raise GeneratorError(f"{what} is empty; choose from {list(allowed)} with {flag}.")
    bad = [v for v in chosen if v not in allowed]
    if bad:
        raise GeneratorError(
            f"unknown {what} {bad}: CIFAR-F defines {list(allowed)} (pass them with {flag}"
            + ("; 0.1 and 0.3 need --extra-alphas" if what == "alpha" else "")
            + ")."
        )
    return sorted(set(chosen))


def grid(
    alphas: Iterable[float] = ALPHAS,
    fcs: Iterable[int] = FCS,
    severities: Iterable[int] = SEVERITIES,
    *,
    extra_alphas: bool = False,
) -> list[CifarFSpec]:
    """The requested test sets (default: all 192), validated; sorted by α, f_c, severity."""
    allowed = ALPHAS + EXTRA_ALPHAS if extra_alphas else ALPHAS
    chosen_alphas = _check_values("alpha", [float(a) for a in alphas], allowed, "--alphas")
    chosen_fcs = _check_values("f_c", fcs, FCS, "--fcs")
    chosen_sev = _check_values("severity", severities, SEVERITIES, "--severities")
    return [
        CifarFSpec(f_c=int(f_c), alpha=float(alpha), severity=int(sev))
        for alpha in chosen_alphas
        for f_c in chosen_fcs
        for sev in chosen_sev
    ]


# --------------------------------------------------------------------------------------------
# masks (centred layout, as in the equations; the hot path uses them in FFT layout)


def paper_mask(f_c: float, alpha: float, size: int = SIZE) -> torch.Tensor:
    """``1 / (|f - f_c| + 1)^α`` on a centred (size, size) grid (DC at size // 2)."""
    f = radial_frequency(size)
    return (f - f_c).abs().add(1.0).pow(-alpha)


def paper_mask_rfft(f_c: float, alpha: float, size: int = SIZE) -> torch.Tensor:
    """:func:`paper_mask` at the bins of an unshifted ``rfft2`` spectrum, (size, size//2+1)."""
    f = rfft_frequency(size)
    return (f - f_c).abs().add(1.0).pow(-alpha)


def reference_mask(f_c: float, alpha: float, size: int = SIZE) -> torch.Tensor:
    """The released mask: centre (15, 15); a bin whose 3x3 sub-points (±0.5) straddle the ring
    ``r = f_c`` gets distance 0, otherwise the smallest |r - f_c| over its sub-points."""
    idx = torch.arange(size, dtype=torch.float64)
    offsets = torch.tensor([-0.5, 0.0, 0.5], dtype=torch.float64)
    sub = idx[:, None] + offsets[None, :] - REFERENCE_CENTRE  # (size, 3)
    d = torch.sqrt(sub[:, None, :, None] ** 2 + sub[None, :, None, :] ** 2) - f_c
    d = d.flatten(-2)  # (i, j, 9)
    straddles = d.min(-1).values * d.max(-1).values <= 0
    g = torch.where(straddles, torch.zeros(()), d.abs().min(-1).values)
    return (g + 1.0).pow(-alpha)


# --------------------------------------------------------------------------------------------
# random draws (separate so tests can inject the released code's draws)


@dataclass(frozen=True)
class PaperDraws:
    """Uniform [0, 1) draws at every bin of the ``rfft2`` half spectrum: (B, 3, H, W//2+1).

    Draws at the mirrored rows of columns 0 and W/2 are unused (those bins are conjugates).
    """

    amplitude: torch.Tensor
    phase: torch.Tensor


@dataclass(frozen=True)
class ReferenceDraws:
    """Draws in the released code's terms: ``amplitude`` = ``uniform(0.8, 1.2, (3, 32, 32))``
    per image (B, 3, 32, 32) in its channel-rolled, centred layout; ``phase`` =
    ``uniform(3, 32, 32)`` per image (B, 32), before the ``· 2π``."""

    amplitude: torch.Tensor
    phase: torch.Tensor


def draw_paper(keys: np.ndarray, size: int = SIZE) -> PaperDraws:
    """Amplitude-jitter and phase draws for the paper protocol from per-image stream keys."""
    shape = (len(keys), 3, size, size // 2 + 1)
    n = 3 * size * (size // 2 + 1)
    amp = streams.uniform(keys, n).reshape(shape)
    phase = streams.uniform(keys, n, offset=streams.uniform_offset(n)).reshape(shape)
    return PaperDraws(amplitude=amp, phase=phase)


def draw_reference(keys: np.ndarray, size: int = SIZE) -> ReferenceDraws:
    """The released code's draws (amplitude jitter per element, one phase per column)."""
    n = 3 * size * size
    lo, hi = AMPLITUDE_JITTER
    amp = streams.uniform(keys, n).reshape(len(keys), 3, size, size).mul_(hi - lo).add_(lo)
    plo, phi = REFERENCE_PHASE_LOW_HIGH
    phase = streams.uniform(keys, size, offset=streams.uniform_offset(n))
    return ReferenceDraws(amplitude=amp, phase=phase.mul_(phi - plo).add_(plo))


# --------------------------------------------------------------------------------------------
# the two perturbations (pure arithmetic, batched; masks in FFT layout avoid fftshift copies)


def _polar(amplitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """``amplitude·e^(i·phase)``; ~2.5x faster on CPU than ``torch.polar`` (vectorised sin/cos)."""
    return torch.complex(amplitude * torch.cos(phase), amplitude * torch.sin(phase))


def _norms(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x.flatten(1), dim=1).view(-1, 1, 1, 1)


def paper_noise(images: torch.Tensor, mask_rfft: torch.Tensor, draws: PaperDraws) -> torch.Tensor:
    """``IFFT(δ)`` (real, float64) for uint8 (B, 3, H, W): δ built on the rfft half and made
    Hermitian, which is :func:`certbench.fourier.spectral.hermitian_symmetrise` in rfft layout."""
    x = images.to(torch.float64).div_(255.0)
    size = x.shape[-1]
    lo, hi = AMPLITUDE_CLIP
    jlo, jhi = AMPLITUDE_JITTER
    amplitude = torch.fft.rfft2(x).abs().clamp_(lo, hi).mul_(mask_rfft)
    amplitude.mul_(draws.amplitude * (jhi - jlo) + jlo)
    half = _polar(amplitude, draws.phase * (2 * math.pi))
    half = hermitian_rfft_columns(half, size)
    return torch.fft.irfft2(half, s=(size, size))


def paper_perturb(
    images: torch.Tensor, mask_rfft: torch.Tensor, draws: PaperDraws, eps: float
) -> torch.Tensor:
    """``x + γ·IFFT(δ)``, γ = ε / ‖IFFT(δ)‖₂, in float64 before clipping and quantisation."""
    noise = paper_noise(images, mask_rfft, draws)
    x = images.to(torch.float64).div_(255.0)
    return noise.mul_(eps / _norms(noise)).add_(x)


def reference_perturb(
    images: torch.Tensor, mask: torch.Tensor, draws: ReferenceDraws, eps: float
) -> torch.Tensor:
    """The released algorithm in float64 (before its truncating uint8 cast), batched.

    ``mask`` and the draws are in the centred layout of the released code; they are moved to
    the unshifted FFT layout once (cheap) instead of shifting every spectrum. The released
    ``fftshift`` also rolled the channel axis by one, so its amplitude draw at channel ``c'``
    perturbed channel ``c' - 1``: we roll the draws back to match.
    """
    x = images.to(torch.float32).div_(255.0).to(torch.float64)  # ToTensor() precision
    spectrum = torch.fft.fft2(x)
    lo, hi = AMPLITUDE_CLIP
    dims = (-2, -1)
    jitter = torch.fft.ifftshift(torch.roll(draws.amplitude, shifts=-1, dims=1), dim=dims)
    n_abs = spectrum.abs().clamp_(lo, hi).mul_(torch.fft.ifftshift(mask, dim=dims)).mul_(jitter)
    phase = torch.fft.ifftshift(draws.phase * (2 * math.pi), dim=-1)[:, None, None, :]
    # one phase per column: 32 sin/cos per image, broadcast over rows and channels
    spectrum.add_(torch.complex(n_abs * torch.cos(phase), n_abs * torch.sin(phase)))
    delta = torch.fft.ifft2(spectrum).abs().clamp_(0.0, 1.0).sub_(x)
    return delta.mul_(eps / _norms(delta)).add_(x)


def quantise_paper(x: torch.Tensor) -> torch.Tensor:
    """Clip to [0, 1] and round to the nearest uint8 level."""
    return x.clamp(0.0, 1.0).mul(255.0).round_().to(torch.uint8)


def quantise_reference(x: torch.Tensor) -> torch.Tensor:
    """The released cast: ``clip(int(x·255), 0, 255)`` (truncation toward zero, no pre-clip)."""
    return x.mul(255.0).trunc_().clamp_(0, 255).to(torch.uint8)


def perturb_batch(
    images: torch.Tensor,
    indices: torch.Tensor,
    spec: CifarFSpec,
    *,
    protocol: Protocol,
    key: int,
) -> torch.Tensor:
    """uint8 (B, 3, H, W) corrupted images for one test set, streams keyed by source index."""
    keys = streams.image_keys(key, indices.numpy())
    size = images.shape[-1]
    if protocol is Protocol.PAPER:
        mask = paper_mask_rfft(spec.f_c, spec.alpha, size)
        return quantise_paper(paper_perturb(images, mask, draw_paper(keys, size), spec.eps))
    mask = reference_mask(spec.f_c, spec.alpha, size)
    return quantise_reference(reference_perturb(images, mask, draw_reference(keys, size), spec.eps))


def set_stream_key(seed: int, dataset: str, protocol: Protocol, spec: CifarFSpec) -> int:
    """Stream key of a test set: (seed, dataset, protocol, config name)."""
    return streams.stream_key(seed, dataset, protocol.value, spec.name)


def corrupt(
    images: torch.Tensor,
    indices: torch.Tensor,
    spec: CifarFSpec,
    *,
    protocol: Protocol = Protocol.PAPER,
    seed: int = 0,
    dataset: str = "cifar10",
    batch_size: int = 1000,
) -> torch.Tensor:
    """Corrupt a whole set in batches; the result does not depend on ``batch_size``."""
    if batch_size < 1:
        raise GeneratorError(f"batch_size must be >= 1, got {batch_size}.")
    key = set_stream_key(seed, dataset, protocol, spec)
    out = torch.empty_like(images)
    for start in range(0, len(images), batch_size):
        stop = start + batch_size
        out[start:stop] = perturb_batch(
            images[start:stop], indices[start:stop], spec, protocol=protocol, key=key
        )
    return out
