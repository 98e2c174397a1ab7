"""Spectral band rule: synthetic spectra land in the expected band; accumulation and agreement."""

from __future__ import annotations

import numpy as np
import pytest

from certbench.errors import GeneratorError
from generators import bands


def ring(radius: float, width: float = 0.7) -> np.ndarray:
    """An amplitude spectrum concentrated on the ring |f| = radius."""
    return np.exp(-((bands.radial_frequency() - radius) ** 2) / (2 * width**2))


@pytest.mark.parametrize(
    ("radius", "expected"),
    [
        (0.0, "low"),
        (2.0, "low"),
        (4.5, "low"),
        (7.0, "mid"),
        (9.5, "mid"),
        (12.0, "high"),
        (15.0, "high"),
    ],
)
def test_ring_spectra_land_in_their_band(radius: float, expected: str) -> None:
    assert bands.assign_band(ring(radius)) == expected


def test_white_noise_is_high_and_dc_shift_is_low() -> None:
    rng = np.random.default_rng(0)
    clean = rng.integers(60, 190, (64, 32, 32, 3), dtype=np.uint8)
    noisy = np.clip(clean + rng.normal(0, 12, clean.shape), 0, 255).astype(np.uint8)
    acc = bands.SpectrumAccumulator()
    acc.add(clean[:20], noisy[:20])
    acc.add(clean[20:], noisy[20:])
    centroid = bands.spectral_centroid(acc.mean())
    assert 11.5 < centroid < 13.0 and bands.assign_band(acc.mean()) == "high"
    shifted = acc.__class__()
    shifted.add(clean, clean + np.uint8(20))
    assert bands.spectral_centroid(shifted.mean()) == pytest.approx(0.0, abs=1e-9)
    assert bands.assign_band(shifted.mean()) == "low"


def test_accumulator_mean_is_batch_independent() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (10, 32, 32, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (10, 32, 32, 3), dtype=np.uint8)
    one, two = bands.SpectrumAccumulator(), bands.SpectrumAccumulator()
    one.add(a, b)
    for i in range(0, 10, 3):
        two.add(a[i : i + 3], b[i : i + 3])
    np.testing.assert_allclose(one.mean(), two.mean(), rtol=1e-12)


def test_corruption_band_uses_severity_3_then_majority_and_agreement() -> None:
    per_set = {
        ("fog", 1): "mid",
        ("fog", 3): "low",
        ("fog", 5): "mid",
        ("pixelate", 1): "high",
        ("pixelate", 2): "mid",
        ("pixelate", 4): "high",
    }
    got = bands.corruption_bands(per_set)
    assert got == {"fog": "low", "pixelate": "high"}
    agree, compared, lines = bands.paper_agreement({**got, "motion_blur": "low", "lines": "mid"})
    assert (agree, compared) == (2, 3) and lines == ["motion_blur: ours low, paper mid"]


def test_spectra_figure_and_errors(tmp_path) -> None:
    spectra = {("fog", 1): ring(2), ("fog", 2): ring(3), ("jpeg_compression", 1): ring(12)}
    labels = {k: bands.assign_band(v) for k, v in spectra.items()}
    path = bands.spectra_figure(spectra, labels, tmp_path / "images" / "spectra.png")
    assert path.stat().st_size > 1000
    with pytest.raises(GeneratorError, match="square"):
        bands.spectral_centroid(np.zeros((4, 5)))
    with pytest.raises(GeneratorError, match="must match"):
        bands.SpectrumAccumulator().add(np.zeros((1, 32, 32, 3)), np.zeros((2, 32, 32, 3)))
    with pytest.raises(GeneratorError, match="no images"):
        bands.SpectrumAccumulator().mean()
