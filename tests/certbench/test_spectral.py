"""Centred FFT helpers: layout conventions, Hermitian symmetrisation, radial spectra."""

from __future__ import annotations

import math

import pytest
import torch

from certbench.fourier import spectral


def test_centred_spectrum_puts_dc_at_the_centre_and_inverts() -> None:
    x = torch.rand(2, 3, 32, 32, dtype=torch.float64)
    spectrum = spectral.fft2c(x)
    torch.testing.assert_close(spectrum[..., 16, 16].real, x.sum(dim=(-2, -1)))
    torch.testing.assert_close(spectral.ifft2c(spectrum).real, x)
    assert spectral.radial_frequency(32)[16, 16] == 0
    assert spectral.radial_frequency(32)[16, 21] == 5
    assert spectral.radial_frequency(32)[13, 20] == 5  # 3-4-5


@pytest.mark.parametrize("size", [32, 7, 8])
def test_hermitian_symmetrise_gives_a_real_inverse_and_keeps_half_the_bins(size: int) -> None:
    spectrum = torch.randn(4, size, size, dtype=torch.complex128)
    hermitian = spectral.hermitian_symmetrise(spectrum)
    assert spectral.ifft2c(hermitian).imag.abs().max() < 1e-12
    keep, self_conjugate = spectral.hermitian_half(size)
    assert torch.equal(hermitian[..., keep], spectrum[..., keep])  # amplitudes untouched
    assert hermitian[..., self_conjugate].imag.abs().max() == 0
    n_pairs = (size * size - int(self_conjugate.sum())) // 2
    assert int(keep.sum()) == n_pairs
    torch.testing.assert_close(spectral.point_reflect(hermitian), torch.conj(hermitian))
    # a real image's spectrum is already Hermitian
    real = spectral.fft2c(torch.rand(size, size, dtype=torch.float64))
    torch.testing.assert_close(spectral.hermitian_symmetrise(real), real)


def test_rfft_helpers_match_the_centred_layout() -> None:
    f = spectral.rfft_frequency(32)
    centred = spectral.radial_frequency(32)
    torch.testing.assert_close(f, torch.fft.ifftshift(centred)[:, :17])
    half = torch.randn(3, 32, 17, dtype=torch.complex128)
    fixed = spectral.hermitian_rfft_columns(half, 32)
    image = torch.fft.irfft2(fixed, s=(32, 32))
    torch.testing.assert_close(torch.fft.rfft2(image), fixed)  # irfft2 lost nothing
    torch.testing.assert_close(fixed[..., 1:16, 3], half[..., 1:16, 3])


def test_radial_spectrum_of_a_single_frequency_wave() -> None:
    rows = torch.arange(32, dtype=torch.float64)[:, None].expand(32, 32)
    wave = torch.cos(2 * math.pi * 6 * rows / 32)  # frequency (6, 0)
    profile = spectral.radial_spectrum(wave)
    assert profile.shape == (24,)  # radii 0..23 (corner bin: round(16·√2) = 23)
    assert int(torch.argmax(profile)) == 6
    assert profile[torch.arange(24) != 6].abs().max() < 1e-9
