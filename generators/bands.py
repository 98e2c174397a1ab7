"""Spectral bands of corruptions (Sun et al., ECCV 2022, Sec. 2 and Appendix C).

The paper groups the CIFAR-10-C corruptions into high/mid/low-frequency bands by looking at the
mean amplitude spectrum of the perturbation. We make the grouping a rule so it can be applied to
any corruption set:

1. For one test set (corruption x severity), the perturbation of image i is
   ``delta_i = corrupted_i - clean_i`` on the [0, 1] scale; its spectrum is
   ``A = mean over images and channels of |fftshift(fft2(delta_i))|`` (32x32, DC at (16, 16)).
2. The band statistic is the energy-weighted mean radial frequency of that spectrum,
   ``centroid = sum(f * A^2) / sum(A^2)`` with ``f = sqrt(u^2 + v^2)`` in cycles per image.
3. The centroid is compared with thirds of the Nyquist radius (16 cycles per image), the edges
   ``certbench.fourier.spectral.BAND_EDGES`` shared with the Fourier-sensitivity heatmaps:
   ``low`` if centroid < 16/3, ``mid`` if centroid < 32/3, else ``high``. Spatially white noise
   has a centroid of about 12.3 (high); a global brightness shift has 0 (low).

A corruption's band is the band of its severity-3 set (the severity of the paper's Fig. 10), or
the most common band over the severities generated when severity 3 is absent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from certbench.errors import GeneratorError
from certbench.fourier import BANDS, frequency_band

# Sun et al., ECCV 2022, Sec. 2: the hand grouping of the CIFAR-10-C corruptions
PAPER_GROUPS: dict[str, str] = {
    **dict.fromkeys(
        ("gaussian_noise", "impulse_noise", "shot_noise", "pixelate", "jpeg_compression"), "high"
    ),
    **dict.fromkeys(
        ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "elastic_transform"), "mid"
    ),
    **dict.fromkeys(("brightness", "fog", "frost", "snow", "contrast"), "low"),
}


def radial_frequency(size: int = 32) -> np.ndarray:
    """|f| in cycles per image for an fftshift-ed (size, size) spectrum."""
    f = np.fft.fftshift(np.fft.fftfreq(size)) * size
    return np.hypot(f[:, None], f[None, :])


class SpectrumAccumulator:
    """Running mean of the perturbation's amplitude spectrum over batches of one test set."""

    def __init__(self, size: int = 32) -> None:
        self._sum = np.zeros((size, size))
        self._count = 0

    def add(self, clean: np.ndarray, corrupted: np.ndarray) -> None:
        """Add uint8 (N, H, W, C) clean/corrupted pairs."""
        if clean.shape != corrupted.shape:
            raise GeneratorError(
                f"clean {clean.shape} and corrupted {corrupted.shape} images must match."
            )
        delta = (corrupted.astype(np.float64) - clean.astype(np.float64)) / 255.0
        spec = np.abs(np.fft.fftshift(np.fft.fft2(delta, axes=(1, 2)), axes=(1, 2)))
        self._sum += spec.sum(axis=(0, 3))
        self._count += delta.shape[0] * delta.shape[3]

    def mean(self) -> np.ndarray:
        if self._count == 0:
            raise GeneratorError("no images were added to the spectrum accumulator.")
        return self._sum / self._count


def spectral_centroid(spectrum: np.ndarray) -> float:
    """Energy-weighted mean radial frequency of an fftshift-ed amplitude spectrum."""
    spectrum = np.asarray(spectrum, dtype=np.float64)
    if spectrum.ndim != 2 or spectrum.shape[0] != spectrum.shape[1]:
        raise GeneratorError(f"spectrum must be a square 2-D array, got shape {spectrum.shape}.")
    energy = spectrum**2
    total = energy.sum()
    if total <= 0:
        return 0.0  # no perturbation at all: nothing moves, call it the lowest band
    return float((radial_frequency(spectrum.shape[0]) * energy).sum() / total)


def assign_band(spectrum: np.ndarray) -> str:
    """'low', 'mid' or 'high' by the documented centroid rule (module docstring)."""
    return frequency_band(spectral_centroid(spectrum))


def corruption_bands(set_bands: Mapping[tuple[str, int], str]) -> dict[str, str]:
    """One band per corruption from per-(corruption, severity) bands: severity 3, else majority."""
    by_name: dict[str, dict[int, str]] = {}
    for (name, level), band in set_bands.items():
        by_name.setdefault(name, {})[level] = band
    result = {}
    for name, levels in by_name.items():
        if 3 in levels:
            result[name] = levels[3]
        else:
            counts = Counter(levels.values())
            result[name] = max(BANDS, key=lambda b: (counts[b], -BANDS.index(b)))
    return result


def paper_agreement(bands: Mapping[str, str]) -> tuple[int, int, list[str]]:
    """(agreeing, compared, disagreement lines) against the hand grouping of Sun et al.,
    ECCV 2022."""
    compared = [name for name in bands if name in PAPER_GROUPS]
    lines = [
        f"{name}: ours {bands[name]}, paper {PAPER_GROUPS[name]}"
        for name in compared
        if bands[name] != PAPER_GROUPS[name]
    ]
    return len(compared) - len(lines), len(compared), lines


def spectra_figure(
    spectra: Mapping[tuple[str, int], np.ndarray],
    bands: Mapping[tuple[str, int], str],
    path: str | Path,
) -> Path:
    """A grid of log amplitude spectra: rows corruptions, columns severities, band in titles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(
        {name for name, _ in spectra}, key=list(dict.fromkeys(n for n, _ in spectra)).index
    )
    levels = sorted({level for _, level in spectra})
    fig, axes = plt.subplots(
        len(names), len(levels), figsize=(1.6 * len(levels), 1.6 * len(names)), squeeze=False
    )
    for r, name in enumerate(names):
        for c, level in enumerate(levels):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if (name, level) in spectra:
                ax.imshow(np.log10(spectra[(name, level)] + 1e-6), cmap="viridis")
                ax.set_title(f"s{level}: {bands[(name, level)]}", fontsize=7)
            if c == 0:
                ax.set_ylabel(name, fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
