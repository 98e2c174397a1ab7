"""FourierMix (Sun et al., ECCV 2022, Eq. 1-2, Algorithm 1): operator statistics, mixture, seeding,
batching."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from certbench.augment.affine import affine_batch
from certbench.augment.fouriermix import (
    CIFAR_AMPLITUDE_SEVERITIES,
    CIFAR_PHASE_SEVERITIES,
    FourierMix,
    FourierMixConfig,
    draw_parameters,
    fourier_mix,
    fourier_operation,
    reflect,
    spectral_noise,
)
from certbench.augment.seeds import RandomStream
from certbench.errors import AugmentationError


@pytest.fixture(autouse=True)
def one_thread():
    """Small FFTs and grid samples run fastest on one thread on a busy two-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def images(count: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.rand((count, 3, 32, 32), generator=torch.Generator().manual_seed(seed)).to(dtype)


def uniforms(count: int, seed: int = 1) -> torch.Tensor:
    shape = (count, 3, 2, 32, 32)
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def canonical_bins() -> torch.Tensor:
    """One bin of every conjugate pair {k, -k}: their draws are independent."""
    flat = torch.arange(32 * 32).view(32, 32)
    return flat < reflect(flat)


def self_conjugate_bins() -> torch.Tensor:
    flat = torch.arange(32 * 32).view(32, 32)
    return flat == reflect(flat)


@pytest.mark.parametrize("severity", CIFAR_AMPLITUDE_SEVERITIES)
def test_amplitude_operator_scales_every_amplitude_within_the_severity(severity):
    x = images(4, dtype=torch.float64)
    s_a = torch.full((4, 3), severity, dtype=torch.float64)
    factor, _ = spectral_noise(uniforms(4), s_a, torch.full((4, 3), math.pi / 8), 5.0)
    out = fourier_operation(x, factor, torch.zeros_like(factor), clip=False)
    before, after = torch.fft.fft2(x), torch.fft.fft2(out)
    ratio = (after.abs() / before.abs())[..., canonical_bins()]
    assert ratio.min() >= 1 - severity - 1e-9 and ratio.max() <= 1 + severity + 1e-9
    torch.testing.assert_close(after.abs(), before.abs() * factor)
    # phases untouched, and the factors are U(1 - s_A, 1 + s_A)
    torch.testing.assert_close(after / after.abs(), before / before.abs())
    ks = stats.kstest(ratio.flatten().numpy(), "uniform", args=(1 - severity, 2 * severity))
    assert ks.pvalue > 1e-3


@pytest.mark.parametrize("bound", CIFAR_PHASE_SEVERITIES)
def test_phase_operator_adds_the_truncated_normal_of_eq_2(bound):
    x = images(4, dtype=torch.float64)
    s_p = torch.full((4, 3), bound, dtype=torch.float64)
    _, phase = spectral_noise(uniforms(4), torch.full((4, 3), 0.3), s_p, 5.0)
    out = fourier_operation(x, torch.ones_like(phase), phase, clip=False)
    before, after = torch.fft.fft2(x), torch.fft.fft2(out)
    torch.testing.assert_close(after.abs(), before.abs())
    change = torch.angle(after / before)
    torch.testing.assert_close(change, phase)
    assert change.abs().max() <= bound + 1e-9
    assert change[..., self_conjugate_bins()].abs().max() < 1e-9  # DC and Nyquist stay real
    sample = change[..., canonical_bins()].flatten().numpy()
    law = stats.truncnorm(-bound / 5.0, bound / 5.0, scale=5.0)
    assert stats.kstest(sample, law.cdf).pvalue > 1e-3


def test_phase_noise_follows_the_stated_pdf_and_not_a_uniform_when_they_differ():
    """With σ comparable to s_P the truncated normal is visibly not uniform: the KS test tells."""
    bound, sigma = math.pi / 4, 0.4
    s_p = torch.full((16, 3), bound, dtype=torch.float64)
    _, phase = spectral_noise(uniforms(16, seed=5), torch.full((16, 3), 0.3), s_p, sigma)
    sample = phase[..., canonical_bins()].flatten().numpy()
    law = stats.truncnorm(-bound / sigma, bound / sigma, scale=sigma)
    assert stats.kstest(sample, law.cdf).pvalue > 1e-3
    assert stats.kstest(sample, "uniform", args=(-bound, 2 * bound)).pvalue < 1e-6
    # the PDF of Eq. 2: φ(x/σ) / (σ (2Φ(s_P/σ) - 1)) integrates to 1 on [-s_P, s_P]
    grid = np.linspace(-bound, bound, 20001)
    pdf = stats.norm.pdf(grid / sigma) / (sigma * (2 * stats.norm.cdf(bound / sigma) - 1))
    assert np.trapezoid(pdf, grid) == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(law.pdf(grid), pdf, rtol=1e-9)


def test_perturbed_spectrum_stays_hermitian_so_the_image_is_real():
    x = images(2, dtype=torch.float64)
    s = torch.full((2, 3), 0.6, dtype=torch.float64)
    factor, phase = spectral_noise(uniforms(2), s, torch.full((2, 3), math.pi / 4), 5.0)
    spectrum = torch.fft.fft2(x) * torch.polar(factor, phase)
    assert torch.fft.ifft2(spectrum).imag.abs().max() < 1e-12
    torch.testing.assert_close(
        fourier_operation(x, factor, phase, clip=False), torch.fft.ifft2(spectrum).real
    )


def test_mixture_is_algorithm_1_with_convex_weights():
    x = images(6)
    seeds = list(range(10, 16))
    cfg = FourierMixConfig()
    out = fourier_mix(x, seeds, cfg)
    p = draw_parameters(seeds, cfg, x.shape, x.device)
    assert torch.all(p.weights >= 0)
    torch.testing.assert_close(p.weights.sum(dim=1), torch.ones(6, dtype=p.weights.dtype))
    assert torch.all(
        (p.blend >= 0) & (p.blend <= 1) & (p.skip[:, None] >= 0) & (p.skip <= 1)[:, None]
    )
    factor, phase = spectral_noise(p.uniforms, p.amplitude[..., None], p.phase[..., None], 5.0)
    expected = []
    for i in range(6):
        chains = []
        for j in range(cfg.width):
            x_f = fourier_operation(x[i], factor[i, j], phase[i, j])
            warped = affine_batch(
                x[i : i + 1],
                p.angle[i, j : j + 1].float(),
                p.tx[i, j : j + 1].float(),
                p.ty[i, j : j + 1].float(),
                p.shear[i, j : j + 1].float(),
            )[0]
            t = float(p.blend[i, j])
            chains.append(float(p.weights[i, j]) * (t * x_f + (1 - t) * warped))
        m = float(p.skip[i])
        expected.append(m * x[i] + (1 - m) * torch.stack(chains).sum(dim=0))
    torch.testing.assert_close(out, torch.stack(expected), rtol=1e-5, atol=1e-5)


def test_identity_operators_give_back_the_image():
    """Severity 0, no affine: every mixed component is x, so a convex mixture must return x."""
    cfg = FourierMixConfig(
        amplitude_severities=(0.0,),
        phase_severities=(1e-9,),
        rotation_degrees=(0.0,),
        translate_fractions=(0.0,),
        shear_degrees=(0.0,),
    )
    x = images(3)
    torch.testing.assert_close(fourier_mix(x, [1, 2, 3], cfg), x, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fill", ["random", "zeros", "ones", "checker"])
def test_output_stays_in_the_unit_interval(fill):
    x = {
        "random": images(8),
        "zeros": torch.zeros(8, 3, 32, 32),
        "ones": torch.ones(8, 3, 32, 32),
        "checker": ((torch.arange(32)[:, None] + torch.arange(32)) % 2)
        .float()
        .expand(8, 3, 32, 32),
    }[fill]
    out = fourier_mix(x.contiguous(), list(range(8)))
    assert out.shape == x.shape and out.dtype == x.dtype
    assert out.min() >= 0 and out.max() <= 1


def test_deterministic_given_seeds_and_different_for_other_seeds():
    x = images(4)
    a = fourier_mix(x, [1, 2, 3, 4])
    assert torch.equal(a, fourier_mix(x, [1, 2, 3, 4]))
    b = fourier_mix(x, [5, 2, 3, 4])
    assert not torch.equal(a[0], b[0]) and torch.equal(a[1:], b[1:])


def test_batched_equals_per_image():
    x = images(5)
    seeds = [2**64 - 1, 0, 17, 2**40 + 3, 99]
    batched = fourier_mix(x, seeds)
    one_by_one = torch.cat([fourier_mix(x[i : i + 1], [s]) for i, s in enumerate(seeds)])
    assert torch.equal(batched, one_by_one)


def test_severities_and_affine_levels_are_drawn_from_the_released_tables():
    cfg = FourierMixConfig()
    p = draw_parameters(list(range(400)), cfg, torch.Size((400, 3, 32, 32)), torch.device("cpu"))
    assert set(p.amplitude.flatten().tolist()) == set(CIFAR_AMPLITUDE_SEVERITIES)
    assert set(p.phase.flatten().tolist()) == set(CIFAR_PHASE_SEVERITIES)
    assert p.angle.abs().max() <= 10 and (p.angle == 0).float().mean() > 0.4  # 4 of 8 levels off
    assert p.tx.abs().max() <= round(32 / 6) and torch.equal(p.tx, p.tx.round())
    assert p.shear.abs().max() <= 0.15


def test_batched_affine_equals_torchvision_affine_image_by_image():
    x = images(32, seed=3)
    g = torch.Generator().manual_seed(4)
    angle = torch.rand(32, generator=g) * 20 - 10
    tx = torch.randint(-6, 7, (32,), generator=g).float()
    ty = torch.randint(-6, 7, (32,), generator=g).float()
    shear = torch.rand(32, generator=g) * 0.3 - 0.15
    out = affine_batch(x, angle, tx, ty, shear)
    for i in range(32):
        ref = TF.affine(
            x[i],
            angle=float(angle[i]),
            translate=[int(tx[i]), int(ty[i])],
            scale=1.0,
            shear=[float(shear[i]), 0.0],
            interpolation=InterpolationMode.NEAREST,
            fill=0,
        )
        assert torch.equal(out[i], ref), i


def test_v2_transform_in_a_pipeline_is_seeded_and_keeps_uint8():
    pipeline = v2.Compose([v2.RandomHorizontalFlip(p=0.0), FourierMix(seed=7)])
    x = (images(3) * 255).round().to(torch.uint8)
    a, b = pipeline(x), v2.Compose([FourierMix(seed=7)])(x)
    assert a.dtype == torch.uint8 and a.shape == x.shape and torch.equal(a, b)
    single = FourierMix(seed=7)(x[0])
    assert single.shape == x[0].shape
    label = torch.tensor(3)
    out, same = FourierMix(seed=1)(x.float() / 255, label)
    assert same is label and out.is_floating_point()


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"width": 0}, "width"),
        ({"alpha": 0.0}, "alpha"),
        ({"phase_sigma": -1.0}, "phase_sigma"),
        ({"amplitude_severities": (1.5,)}, "amplitude_severities"),
        ({"phase_severities": (4.0,)}, "phase_severities"),
        ({"rotation_degrees": (-1.0,)}, "rotation_degrees"),
    ],
)
def test_bad_configuration_is_refused(kwargs, phrase):
    with pytest.raises(AugmentationError, match=phrase):
        FourierMixConfig(**kwargs)


def test_bad_inputs_are_refused_with_the_fix():
    with pytest.raises(AugmentationError, match="float tensor"):
        fourier_mix(torch.zeros(1, 3, 32, 32, dtype=torch.uint8), [0])
    with pytest.raises(AugmentationError, match="batch axis"):
        fourier_mix(torch.zeros(3, 32, 32), [0])
    with pytest.raises(AugmentationError, match="one seed per image"):
        fourier_mix(torch.zeros(2, 3, 32, 32), [0])
    with pytest.raises(AugmentationError, match="derive_seed"):
        fourier_mix(torch.zeros(1, 3, 32, 32), [-1])


def test_random_streams_use_all_64_seed_bits_and_salts_split_them():
    low = RandomStream(5).uniform((64,))
    assert torch.equal(low, RandomStream(5).uniform((64,)))
    assert not torch.equal(low, RandomStream(5 + 2**32).uniform((64,)))  # high bits matter
    assert not torch.equal(low, RandomStream(5, salt=1).uniform((64,)))
    normal = RandomStream(2**64 - 1).normal((20_000,))
    assert normal.dtype == torch.float32 and abs(float(normal.std()) - 1) < 0.03
