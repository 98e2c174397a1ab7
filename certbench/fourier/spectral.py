"""FFT helpers shared by CIFAR-F, FourierMix and Fourier-sensitivity heatmaps.

Conventions: images are ``(..., H, W)`` tensors (channels and batch leading); spectra are
*centred* (``fftshift`` over the last two axes only), so the DC term sits at ``(H // 2, W // 2)``
— index (16, 16) for CIFAR. Frequencies are integer offsets from that centre (``u`` down the
rows, ``v`` along the columns) and the azimuthal frequency is ``f = sqrt(u² + v²)``.
"""

from __future__ import annotations

import torch

_DIMS = (-2, -1)

BANDS = ("low", "mid", "high")
"""Spectral bands (Sun et al., ECCV 2022, Sec. 2, Table 1): low-, mid- and high-frequency
perturbations."""

NYQUIST = 16.0
"""Largest frequency along one axis of a 32×32 image, in cycles per image."""

BAND_EDGES = (NYQUIST / 3, 2 * NYQUIST / 3)
"""Radial frequencies (cycles per image) splitting low | mid | high: thirds of the Nyquist radius.

One rule for every band in the project: corruption sets are banded by the energy-weighted
centroid of their perturbation spectrum (``generators.bands``), Fourier-sensitivity heatmaps by
the radial frequency of each basis image (``certbench.fourier.sensitivity``).
"""


def fft2c(x: torch.Tensor) -> torch.Tensor:
    """Centred 2-D spectrum over the last two axes: ``fftshift(fft2(x))``, DC at (H//2, W//2)."""
    return torch.fft.fftshift(torch.fft.fft2(x, dim=_DIMS), dim=_DIMS)


def ifft2c(spectrum: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`fft2c` (complex result): ``ifft2(ifftshift(F))``."""
    return torch.fft.ifft2(torch.fft.ifftshift(spectrum, dim=_DIMS), dim=_DIMS)


def centred_offsets(
    height: int, width: int | None = None, *, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u, v)`` grids of shape (H, W): row/column offsets from the centred DC index."""
    width = height if width is None else width
    u = torch.arange(height, dtype=dtype) - height // 2
    v = torch.arange(width, dtype=dtype) - width // 2
    rows, cols = torch.meshgrid(u, v, indexing="ij")
    return rows, cols


def radial_frequency(
    height: int, width: int | None = None, *, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Azimuthal frequency ``sqrt(u² + v²)`` of every bin of a centred (H, W) spectrum."""
    u, v = centred_offsets(height, width, dtype=dtype)
    return torch.sqrt(u * u + v * v)


def mirror_index(size: int) -> torch.Tensor:
    """Index map ``k -> -k`` on one centred axis: bin ``i`` pairs with ``(2·(size//2) - i) % size``.

    For even sizes the Nyquist bin (index 0, offset ``-size/2``) and the centre map to themselves.
    """
    centre = size // 2
    return (2 * centre - torch.arange(size)) % size


def point_reflect(spectrum: torch.Tensor) -> torch.Tensor:
    """``S(-u, -v)`` for a centred spectrum (point reflection through the DC bin)."""
    h, w = spectrum.shape[-2:]
    return spectrum.index_select(-2, mirror_index(h)).index_select(-1, mirror_index(w))


def hermitian_half(height: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean masks (H, W) of a centred grid: ``keep`` bins and ``self_conjugate`` bins.

    Every bin is either self-conjugate (``-k ≡ k``: DC and the Nyquist bins), or exactly one of
    the pair ``{k, -k}`` is in ``keep``. Drawing random values on ``keep`` and mirroring them
    gives a Hermitian spectrum with each bin's marginal law intact.
    """
    width = height if width is None else width
    rows = torch.arange(height)[:, None].expand(height, width)
    cols = torch.arange(width)[None, :].expand(height, width)
    mrows = mirror_index(height)[rows]
    mcols = mirror_index(width)[cols]
    self_conjugate = (mrows == rows) & (mcols == cols)
    flat = rows * width + cols
    mirror_flat = mrows * width + mcols
    keep = flat < mirror_flat
    return keep, self_conjugate


def hermitian_symmetrise(spectrum: torch.Tensor) -> torch.Tensor:
    """Make a centred spectrum Hermitian so its inverse FFT is real.

    Bins in the canonical half (:func:`hermitian_half`) are kept, their mirrors become the
    complex conjugates, and self-conjugate bins keep only their real part. Amplitudes on the
    kept half are unchanged, unlike ``(S + conj(S(-k))) / 2``, which would shrink them.
    """
    h, w = spectrum.shape[-2:]
    keep, self_conjugate = hermitian_half(h, w)
    mirrored = torch.conj(point_reflect(spectrum))
    out = torch.where(keep, spectrum, mirrored)
    return torch.where(self_conjugate, spectrum.real.to(spectrum.dtype), out)


def frequency_band(frequency: float, *, size: int = 32) -> str:
    """'low', 'mid' or 'high' for a radial frequency in cycles per image (:data:`BAND_EDGES`).

    For images of another ``size`` the edges scale with its Nyquist frequency ``size / 2``.
    """
    scale = (size / 2) / NYQUIST
    if frequency < BAND_EDGES[0] * scale:
        return BANDS[0]
    if frequency < BAND_EDGES[1] * scale:
        return BANDS[1]
    return BANDS[2]


def radial_profile(values: torch.Tensor, *, max_radius: int | None = None) -> torch.Tensor:
    """Mean of ``values`` (…, H, W), over centred bins grouped by rounded radius ``round(f)``.

    Returns ``(…, R + 1)`` with R = ``max_radius`` (default: the largest radius on the grid,
    23 for 32×32, the corner bin); radii with no bin are 0.
    """
    h, w = values.shape[-2:]
    radius = torch.round(radial_frequency(h, w)).to(torch.int64).flatten()
    top = int(radius.max()) if max_radius is None else int(max_radius)
    keep = radius <= top
    flat = values.flatten(-2)[..., keep].to(torch.float64)
    bins = radius[keep]
    counts = torch.bincount(bins, minlength=top + 1).to(torch.float64)
    sums = torch.zeros((*flat.shape[:-1], top + 1), dtype=torch.float64)
    sums.index_add_(-1, bins, flat)
    return sums / counts.clamp(min=1)


def radial_spectrum(x: torch.Tensor, *, max_radius: int | None = None) -> torch.Tensor:
    """Mean Fourier amplitude ``|fft2c(x)|`` per integer azimuthal frequency, shape (…, R + 1)."""
    return radial_profile(fft2c(x.to(torch.float64)).abs(), max_radius=max_radius)


def rfft_frequency(height: int, width: int | None = None) -> torch.Tensor:
    """Azimuthal frequency of every bin of an *unshifted* ``rfft2`` spectrum, shape (H, W//2+1).

    Same values as :func:`radial_frequency` at the matching bins, so a centred mask can be
    evaluated directly in the layout ``torch.fft.rfft2`` returns (no fftshift copies).
    """
    width = height if width is None else width
    u = torch.fft.fftfreq(height, d=1.0 / height, dtype=torch.float64)
    v = torch.fft.rfftfreq(width, d=1.0 / width, dtype=torch.float64)
    return torch.sqrt(u[:, None] ** 2 + v[None, :] ** 2)


def hermitian_rfft_columns(half: torch.Tensor, width: int) -> torch.Tensor:
    """Make an ``rfft2``-layout half spectrum (…, H, W//2+1) exactly Hermitian, in a copy.

    ``irfft2`` already mirrors columns 1..W/2-1; the self-paired columns (0 and, for even W,
    W/2) must satisfy ``S[-u] = conj(S[u])`` themselves. Rows 1..H/2-1 are kept, their mirrors
    become conjugates and the self-conjugate rows (0, H/2) keep their real part: the same rule
    as :func:`hermitian_symmetrise`, so kept bins keep their amplitude.
    """
    out = half.clone()
    h = half.shape[-2]
    cols = [0, width // 2] if width % 2 == 0 else [0]
    mirror = mirror_index(h)
    rows = torch.arange(h)
    keep = rows < mirror
    selfc = rows == mirror
    for col in cols:
        column = half[..., :, col]
        mirrored = torch.conj(column.index_select(-1, mirror))
        fixed = torch.where(keep, column, mirrored)
        out[..., :, col] = torch.where(selfc, column.real.to(column.dtype), fixed)
    return out
