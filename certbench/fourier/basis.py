"""Fourier basis images U_{i,j} and the perturbation x̃ = x + r·ε·U_{i,j} of Fourier sensitivity
analysis (Sun et al., ECCV 2022, §2.2 and Appendix, after Yin et al. 2019,
https://arxiv.org/abs/1906.08988).

What the sources say, side by side (Sun et al., "A Spectral View of Randomized
Smoothing under Common Corruptions", ECCV 2022, code https://github.com/jiachens/FourierMix; Yin
et al.'s code is google-research's ``frequency_analysis/freq_heatmap.py``):

- Basis. Sun et al.: "a real-valued matrix U_{i,j} ∈ R^{d×d} where ‖U_{i,j}‖₂ = 1, and FFT(U_{i,j})
  only has two non-zero elements at (i, j) and (−i, −j) in the coordinate that views the image
  center as the origin." Yin et al.'s code (``_get_fourier_basis``): centred spectrum with
  ``0.5 + 0.5j`` at (i, j) and ``0.5 − 0.5j`` at its mirror (``1`` at a self-mirrored bin),
  ``U = sqrt(d·d) · real(ifft2(ifftshift(spectrum)))``, visiting bins in row-major order and
  storing the same image at the mirror: U_{−i,−j} = U_{i,j} exactly. Sun et al.'s released code
  (``code/fourier_basis.py``, copied from an unofficial port) instead builds a cosine,
  ``irfftn(one_hot)`` normalised to unit norm, and fills the left half of its grid with
  flipped (i.e. translated) copies of the right half.
  **We implement Yin et al.'s construction** (the reference Sun et al. cite for the analysis): it
  satisfies Sun et al.'s definition for every bin, its mirror images are identical (so one
  certification serves both cells, below), and U(m, n) = (cos θ − sin θ)/d with
  θ = 2π(i·m + j·n)/d. The released cosine differs only by a translation of the pattern.
- Bins. A 32×32 centred grid has offsets i, j ∈ {−16, …, 15} (DC at array index (16, 16), as in
  ``certbench.fourier.spectral``). The four self-mirrored bins (0, 0), (0, −16), (−16, 0), (−16,
  −16) have a *one*-element spectrum (a real cosine; "two elements" is impossible there). Sun
  et al.'s released code evaluates 31×31 bins (it drops the −16 Nyquist row and column); we keep the
  whole 32×32 grid, as Yin et al. do.
- Hermitian symmetry. U_{i,j} = U_{−i,−j}, so the two cells of a mirror pair are the same
  experiment: each distinct basis image is certified **once** (514 of the 1,024 cells of a 32×32
  grid: 510 pairs / 2 + 4 self-mirrored bins) and the heatmap is filled by mirroring. The
  representative of a pair is the bin Yin et al.'s loop meets first (smaller row-major index in
  the centred layout, ``certbench.fourier.spectral.hermitian_half``); the released code certifies
  all 961 of its cells.
- Perturbation and RGB. Sun et al.: "x̃_{i,j} = x + r·ε·U_{i,j} … r is randomly sampled in
  {−1, 1}, ε is the perturbation in ℓ2 norm, and we treat the RGB channels independently", with
  ε = 4. Yin et al. (paper and ``_generate_perturbed_images(rand_flip=True)``): every channel gets
  ε·U_{i,j} with its *own* random sign. Sun et al.'s released ``certify_fourier.py``: one
  ``random.choice((-1, 1))`` per image applied to all three channels (its basis image is
  replicated over RGB). Both give each channel an ℓ2 norm of ε (‖x̃ − x‖₂ = ε·√3 over the
  image), neither clips x̃ to [0, 1]. **We implement both** as ``channel_signs``:
  ``"independent"`` (the paper's words, as Yin et al. mean them; "per-channel" on pages and in
  the CLI) and ``"shared"`` (the released code, behind the paper's published heatmaps:
  "per-image", the default since protocol records say which); no clipping, like both codes.
  On the demo model's base map the choice is not small (low-band accuracy about 0.95 per
  channel vs 0.89 per image), so every stored heatmap names its convention.
- Randomness. The signs of image ``index`` at grid point (i, j) come from a generator seeded by
  (seed, test set, "fourier-sign", "i,j", index) via ``certbench.smoothing.streams.derive_seed``, so
  they do not depend on which other points or images are computed alongside, nor on sharding.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

from certbench.errors import SensitivityError
from certbench.fourier.grid import (
    CHANNEL_SIGNS,
    ChannelSigns,
    Point,
    canonical,
    distinct_points,
    grid_offsets,
    mirror,
    point_key,
)
from certbench.smoothing import derive_seed

__all__ = [
    "CHANNEL_SIGNS",
    "ChannelSigns",
    "Point",
    "basis_image",
    "basis_stack",
    "canonical",
    "distinct_points",
    "grid_offsets",
    "mirror",
    "perturb",
    "perturbation_signs",
    "point_key",
    "spectrum_support",
]


def basis_image(point: Point, size: int) -> torch.Tensor:
    """U_{i,j} (size, size) in float64, unit ℓ2 norm, Yin et al.'s construction (module doc)."""
    return torch.from_numpy(_basis_array(canonical(point, size), size).copy())


@lru_cache(maxsize=2048)
def _basis_array(point: Point, size: int) -> np.ndarray:
    # numpy's FFT: a 32×32 transform is microseconds, without torch's thread-pool start-up
    i, j = point
    half = size // 2
    spectrum = np.zeros((size, size), dtype=np.complex128)
    mi, mj = mirror((i, j), size)
    if (mi, mj) == (i, j):
        spectrum[i + half, j + half] = 1.0
    else:
        spectrum[i + half, j + half] = 0.5 + 0.5j
        spectrum[mi + half, mj + half] = 0.5 - 0.5j
    image = np.fft.ifft2(np.fft.ifftshift(spectrum)).real * float(size)
    image.flags.writeable = False
    return image


def basis_stack(points: Sequence[Point], size: int) -> torch.Tensor:
    """U for each point, shape (P, size, size), float64."""
    if not points:
        return torch.zeros((0, size, size), dtype=torch.float64)
    return torch.stack([basis_image(p, size) for p in points])


def spectrum_support(image: torch.Tensor, *, tol: float = 1e-9) -> set[Point]:
    """Centred bins where the centred FFT of ``image`` is non-zero (above ``tol`` × the peak)."""
    spectrum = np.abs(np.fft.fftshift(np.fft.fft2(np.asarray(image, dtype=np.float64))))
    half = image.shape[-1] // 2
    rows, cols = np.nonzero(spectrum > tol * spectrum.max())
    return {(int(r) - half, int(c) - half) for r, c in zip(rows, cols, strict=True)}


def perturbation_signs(
    point: Point,
    indices: Sequence[int] | np.ndarray,
    *,
    channels: int,
    mode: ChannelSigns,
    seed: int,
    test_set: str = "",
) -> np.ndarray:
    """r ∈ {−1, +1} per (image, channel), shape (N, channels), int8; one stream per image."""
    if mode not in CHANNEL_SIGNS:
        raise SensitivityError(f"channel_signs must be one of {CHANNEL_SIGNS}, got {mode!r}")
    draws = 1 if mode == "shared" else channels
    out = np.empty((len(indices), channels), dtype=np.int8)
    for row, index in enumerate(indices):
        stream = derive_seed(seed, test_set, "fourier-sign", point_key(point), int(index))
        bits = np.random.default_rng(stream).integers(0, 2, size=draws)
        out[row] = 2 * bits - 1  # broadcasts a shared sign over the channels
    return out


def perturb(
    images: torch.Tensor, basis: torch.Tensor, signs: np.ndarray, epsilon: float
) -> torch.Tensor:
    """x̃ = x + ε·r_c·U per image and channel c, float32, not clipped (module doc)."""
    r = torch.as_tensor(signs, dtype=torch.float64, device=images.device)[:, :, None, None]
    delta = epsilon * r * basis.to(images.device)[None, None]
    return (images.to(torch.float64) + delta).to(torch.float32)
