"""CIFAR-C corruptions: determinism, severity ordering, dtype/shape, closed-form noise statistics,
and agreement with literal per-image implementations of the original recipe where it is exact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage, stats

from certbench.errors import GeneratorError
from generators import corruptions_c as cc
from generators.corruption_ops import (
    PLASMA_DRAWS,
    bilinear_sample,
    disk_kernel,
    hsv_to_rgb,
    line_motion_blur,
    plasma_fractal,
    rgb_to_hsv,
)
from generators.corruption_runs import SEVERITIES, image_rngs
from generators.frost import frost_textures

NAMES = list(cc.CIFAR_C)


def natural_images(n: int, seed: int = 0) -> np.ndarray:
    """Mid-grey images with a 1/f amplitude spectrum (natural-image statistics), (n, 32, 32, 3)."""
    rng = np.random.default_rng(seed)
    f = np.fft.fftfreq(32)
    radius = np.hypot(f[:, None], f[None, :])
    radius[0, 0] = 1.0
    spec = (rng.standard_normal((n, 3, 32, 32)) + 1j * rng.standard_normal((n, 3, 32, 32))) / radius
    x = np.real(np.fft.ifft2(spec))
    x = (x - x.mean(axis=(1, 2, 3), keepdims=True)) / x.std(axis=(1, 2, 3), keepdims=True)
    return (np.clip(0.5 + 0.15 * x, 0, 1) * 255).astype(np.uint8).transpose(0, 2, 3, 1)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return natural_images(12)


def test_registry_has_the_15_corruptions_with_5_severities() -> None:
    assert len(NAMES) == 15
    assert all(len(spec.constants) == 5 for spec in cc.CIFAR_C.values())


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_uint8_and_batch_independent(name: str, images: np.ndarray) -> None:
    for severity in (1, 5):
        out = cc.corrupt(images, name, severity, seed=7)
        assert out.dtype == np.uint8 and out.shape == (12, 32, 32, 3)
        np.testing.assert_array_equal(out, cc.corrupt(images, name, severity, seed=7))
        part = cc.corrupt(images[4:7], name, severity, seed=7, indices=[4, 5, 6])
        np.testing.assert_array_equal(part, out[4:7])
    if cc.CIFAR_C[name].sample is not None:
        assert not np.array_equal(
            cc.corrupt(images, name, 3, seed=7), cc.corrupt(images, name, 3, seed=8)
        )


def _l2(out: np.ndarray, clean: np.ndarray) -> float:
    diff = out.astype(np.float64) - clean.astype(np.float64)
    return float(np.sqrt((diff**2).sum(axis=(1, 2, 3))).mean())


# glass_blur, frost and elastic_transform: the original constants are not ordered in pixel L2
# (see the dedicated tests below, which check the quantity each severity scale actually grows).
L2_ORDERED = [n for n in NAMES if n not in ("glass_blur", "frost", "elastic_transform")]


@pytest.mark.parametrize("name", L2_ORDERED)
def test_severity_monotone_in_l2(name: str, images: np.ndarray) -> None:
    sizes = [_l2(cc.corrupt(images, name, s, seed=1), images) for s in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(sizes)), sizes


def test_glass_blur_orders_blur_and_shuffle(images: np.ndarray) -> None:
    # sigma .05 < .25 < .4 at one iteration (and .25 < .4 at two): less high-frequency energy;
    # two iterations vs one at equal sigma (s4 vs s2, s5 vs s3): larger displacement from clean.
    outs = [cc.corrupt(images, "glass_blur", s, seed=1).astype(float) for s in SEVERITIES]
    hf = [float(np.mean(ndimage.laplace(o, mode="nearest") ** 2)) for o in outs]
    assert hf[0] > hf[1] > hf[2] and hf[3] > hf[4]
    l2 = [_l2(o, images) for o in outs]
    assert l2[3] > l2[1] and l2[4] > l2[2]


def test_frost_amount_grows_with_severity() -> None:
    # On a black probe the output is c1 * texture crop: c1 = .2, .3, .4, .4, .45.
    black = np.zeros((64, 32, 32, 3), np.uint8)
    amounts = [cc.corrupt(black, "frost", s, seed=1).mean() for s in SEVERITIES]
    assert all(b > 0.95 * a for a, b in itertools.pairwise(amounts)), amounts
    assert amounts[1] > amounts[0] and amounts[2] > amounts[1] and amounts[4] > amounts[2]


def test_elastic_non_affine_displacement_grows_with_severity() -> None:
    # A linear ramp probe turns the output into the sampling coordinates; what is left after an
    # affine fit is the elastic displacement, which the severities scale up (alpha up, sigma down).
    rows, cols = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    probe = np.zeros((32, 32, 32, 3), np.uint8)
    probe[..., 0], probe[..., 1], probe[..., 2] = 20 + 6 * cols, 20 + 6 * rows, 128
    inner = (slice(6, 26), slice(6, 26))
    design = np.stack([cols[inner].ravel(), rows[inner].ravel(), np.ones(400)], axis=1)
    energy = []
    for s in SEVERITIES:
        out = cc.corrupt(probe, "elastic_transform", s, seed=3).astype(float) / 6
        res = []
        for image in out:
            for ch in (0, 1):
                y = image[inner][..., ch].ravel()
                coef, *_ = np.linalg.lstsq(design, y, rcond=None)
                res.append(np.mean((y - design @ coef) ** 2))
        energy.append(float(np.mean(res)))
    assert all(b > a for a, b in itertools.pairwise(energy)), energy


# ---------------------------------------------------------------------------------------------
# closed-form noise statistics on a constant grey image


def _grey(n: int, value: int = 128) -> np.ndarray:
    return np.full((n, 32, 32, 3), value, np.uint8)


def test_gaussian_noise_matches_discretised_normal() -> None:
    c = cc.CIFAR_C["gaussian_noise"].constants[2]
    out = cc.corrupt(_grey(32), "gaussian_noise", 3, seed=0).ravel()
    x = 128 / 255
    edges = np.arange(256) / 255.0  # out = k  <=>  k/255 <= x + noise < (k+1)/255
    cdf = stats.norm.cdf((np.append(edges, 1.0 + 1 / 255) - x) / c)
    probs = np.diff(cdf)
    probs[0] += cdf[0]
    probs[-1] += 1 - cdf[-1]
    counts = np.bincount(out, minlength=256)
    keep = probs * out.size > 20
    expected = probs[keep] / probs[keep].sum() * counts[keep].sum()
    assert stats.chisquare(counts[keep], expected).pvalue > 1e-3
    assert abs(out.astype(float).std() / 255 - c) < 0.02 * c


def test_shot_noise_matches_poisson() -> None:
    c = cc.CIFAR_C["shot_noise"].constants[4]  # 50
    x = 128 / 255
    out = cc.corrupt(_grey(32), "shot_noise", 5, seed=0).ravel()
    k = np.arange(0, 200)
    values = np.floor(np.clip(k / c, 0, 1) * 255).astype(int)
    probs = np.bincount(values, weights=stats.poisson.pmf(k, x * c), minlength=256)
    counts = np.bincount(out, minlength=256)
    assert set(np.flatnonzero(counts)) <= set(np.flatnonzero(probs))
    keep = probs * out.size > 20
    expected = probs[keep] / probs[keep].sum() * counts[keep].sum()
    assert stats.chisquare(counts[keep], expected).pvalue > 1e-3


def test_impulse_noise_salt_and_pepper_rates() -> None:
    amount = cc.CIFAR_C["impulse_noise"].constants[4]
    out = cc.corrupt(_grey(32), "impulse_noise", 5, seed=0).ravel()
    n = out.size
    assert set(np.unique(out)) == {0, 128, 255}
    for value in (0, 255):
        hits = int((out == value).sum())
        assert stats.binomtest(hits, n, amount / 2).pvalue > 1e-3


# ---------------------------------------------------------------------------------------------
# the batched forms against literal per-image versions of the original recipe


def test_pixelate_is_bit_exact_with_pillow(images: np.ndarray) -> None:
    rng = np.random.default_rng(5)
    noisy = rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    for batch in (images[:6], noisy):
        for severity, c in enumerate(cc.CIFAR_C["pixelate"].constants, start=1):
            ours = cc.corrupt(batch, "pixelate", severity)
            for image, got in zip(batch, ours, strict=True):
                small = int(32 * c)
                ref = Image.fromarray(image).resize((small, small), Image.BOX)
                ref = np.asarray(ref.resize((32, 32), Image.BOX))
                np.testing.assert_array_equal(got, ref)


def _literal_clipped_zoom(img: np.ndarray, zoom: float) -> np.ndarray:
    h = img.shape[0]
    ch = int(np.ceil(h / zoom))
    top = (h - ch) // 2
    img = ndimage.zoom(img[top : top + ch, top : top + ch], (zoom, zoom, 1), order=1)
    trim = (img.shape[0] - h) // 2
    return img[trim : trim + h, trim : trim + h]


def test_zoom_blur_matches_literal_scipy_zooms(images: np.ndarray) -> None:
    factors = cc.CIFAR_C["zoom_blur"].constants[4]
    ours = cc.corrupt(images[:3], "zoom_blur", 5).astype(int)
    for image, got in zip(images[:3], ours, strict=True):
        x = image / 255.0
        acc = np.zeros_like(x)
        for z in factors:
            acc += _literal_clipped_zoom(x, z)
        ref = np.uint8(np.clip((x + acc) / (len(factors) + 1), 0, 1) * 255).astype(int)
        assert np.abs(got - ref).max() <= 1
        assert (got != ref).mean() < 0.01  # float rounding at exact integer boundaries only


def _literal_plasma(u: np.ndarray, wibbledecay: float, mapsize: int = 32) -> np.ndarray:
    """The original diamond-square, with np.random.uniform replaced by the given U[0,1) draws."""
    draws = iter(u)
    maparray = np.empty((mapsize, mapsize))
    maparray[0, 0] = 0
    stepsize, wibble = mapsize, 100.0

    def wibbledmean(array: np.ndarray) -> np.ndarray:
        noise = np.array([next(draws) for _ in range(array.size)]).reshape(array.shape)
        return array / 4 + wibble * (-wibble + 2 * wibble * noise)

    while stepsize >= 2:
        half = stepsize // 2
        cornerref = maparray[0:mapsize:stepsize, 0:mapsize:stepsize]
        squareaccum = cornerref + np.roll(cornerref, shift=-1, axis=0)
        squareaccum += np.roll(squareaccum, shift=-1, axis=1)
        maparray[half:mapsize:stepsize, half:mapsize:stepsize] = wibbledmean(squareaccum)
        drgrid = maparray[half:mapsize:stepsize, half:mapsize:stepsize]
        ulgrid = maparray[0:mapsize:stepsize, 0:mapsize:stepsize]
        ltsum = drgrid + np.roll(drgrid, 1, axis=0) + ulgrid + np.roll(ulgrid, -1, axis=1)
        maparray[0:mapsize:stepsize, half:mapsize:stepsize] = wibbledmean(ltsum)
        ttsum = drgrid + np.roll(drgrid, 1, axis=1) + ulgrid + np.roll(ulgrid, -1, axis=0)
        maparray[half:mapsize:stepsize, 0:mapsize:stepsize] = wibbledmean(ttsum)
        stepsize //= 2
        wibble /= wibbledecay
    maparray -= maparray.min()
    return maparray / maparray.max()


def test_plasma_fractal_matches_literal_diamond_square() -> None:
    u = np.random.default_rng(0).random((3, PLASMA_DRAWS))
    ours = plasma_fractal(u, 2.5)
    for k in range(3):
        np.testing.assert_allclose(ours[k], _literal_plasma(u[k], 2.5), rtol=1e-9, atol=1e-12)


def test_glass_blur_matches_literal_view_swap_loop(images: np.ndarray) -> None:
    severity = 4
    sigma, delta, iterations = cc.CIFAR_C["glass_blur"].constants[severity - 1]
    ours = cc.corrupt(images[:2], "glass_blur", severity, seed=11)
    rngs = image_rngs(11, "cifar-c", "glass_blur", severity, [0, 1])
    for image, rng, got in zip(images[:2], rngs, ours, strict=True):
        draws = cc._sample_glass(rng, image, (sigma, delta, iterations))["shifts"]
        shifts = iter(draws.reshape(-1, 2))
        blur = lambda a: ndimage.gaussian_filter(a, (sigma, sigma, 0), mode="nearest")  # noqa: E731
        x = np.uint8(blur(image / 255.0) * 255)
        for _ in range(iterations):
            for h in range(32 - delta, delta, -1):
                for w in range(32 - delta, delta, -1):
                    dx, dy = next(shifts)
                    hp, wp = h + dy, w + dx
                    # numpy views: this "swap" copies, exactly as in the original
                    x[h, w], x[hp, wp] = x[hp, wp], x[h, w]
        ref = np.uint8(np.clip(blur(x / 255.0), 0, 1) * 255)
        np.testing.assert_array_equal(got, ref)


def test_defocus_matches_full_kernel_correlation(images: np.ndarray) -> None:
    kernel = disk_kernel(1.5, 0.1)
    assert kernel.shape == (17, 17) and abs(kernel.sum() - 1) < 1e-12
    ref = ndimage.correlate(images[:2] / 255.0, kernel[None, :, :, None], mode="mirror")
    ref = np.uint8(np.clip(ref, 0, 1) * 255).astype(int)
    ours = cc.corrupt(images[:2], "defocus_blur", 5).astype(int)
    assert np.abs(ours - ref).max() <= 1


def test_motion_blur_kernel_smears_along_its_angle() -> None:
    # A vertical stripe blurred at angle 0 spreads along rows only; a constant image is unchanged.
    x = np.zeros((1, 32, 32, 1))
    x[0, :, 16] = 255.0
    out = line_motion_blur(x, 6, 2.0, np.array([0.0]))[0, :, :, 0]
    assert np.allclose(out, out[0:1])  # every row identical
    assert out[0, 16] > 0 and out[0, 10] > 0 and out[0, 17] == 0  # one-sided: reads x + i
    flat = np.full((2, 32, 32, 3), 77.0)
    np.testing.assert_allclose(line_motion_blur(flat, 9, 2.5, np.array([10.0, -40.0])), flat)


def test_hsv_round_trip_and_brightness_raises_value(images: np.ndarray) -> None:
    x = images / 255.0
    np.testing.assert_allclose(hsv_to_rgb(rgb_to_hsv(x)), x, atol=1e-12)
    out = cc.corrupt(images, "brightness", 2).astype(float) / 255
    expected = np.minimum(x.max(-1) + 0.1, 1.0)
    assert np.abs(out.max(-1) - expected).max() <= 1 / 255 + 1e-9


def test_frost_bank_is_fixed_and_textured() -> None:
    bank = frost_textures()
    assert bank.shape == (5, 192, 192, 3) and bank.dtype == np.uint8
    frost_textures.cache_clear()
    np.testing.assert_array_equal(bank, frost_textures())
    assert bank.std() > 20  # crystals, not a flat wash


def test_errors_name_the_argument(images: np.ndarray) -> None:
    with pytest.raises(GeneratorError, match="corruption='rain'"):
        cc.corrupt(images, "rain", 1)
    with pytest.raises(GeneratorError, match="severity=6"):
        cc.corrupt(images, "fog", 6)
    with pytest.raises(GeneratorError, match="shape"):
        cc.corrupt(images[:, :16], "fog", 1)
    with pytest.raises(GeneratorError, match="indices"):
        cc.corrupt(images, "fog", 1, indices=[0, 1])


@pytest.mark.parametrize(
    ("border", "scipy_mode"), [("reflect101", "mirror"), ("symmetric", "reflect")]
)
def test_bilinear_reflections_match_scipy_map_coordinates(border: str, scipy_mode: str) -> None:
    # OpenCV BORDER_REFLECT_101 is scipy 'mirror'; scipy 'reflect' is what the original's
    # map_coordinates used for the elastic displacement.
    rng = np.random.default_rng(0)
    image = rng.random((2, 32, 32, 3))
    rows = rng.uniform(-3, 35, (2, 32, 32))
    cols = rng.uniform(-3, 35, (2, 32, 32))
    ours = bilinear_sample(image, rows, cols, border=border)
    for b in range(2):
        for ch in range(3):
            ref = ndimage.map_coordinates(
                image[b, :, :, ch], [rows[b], cols[b]], order=1, mode=scipy_mode
            )
            np.testing.assert_allclose(ours[b, :, :, ch], ref, atol=1e-12)
