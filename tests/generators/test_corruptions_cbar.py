"""CIFAR-C-bar corruptions: determinism, severity ordering, dtype/shape, and the vectorised forms
against literal per-pixel versions of the paper's released transforms, given the same draws."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import ndimage

from certbench.errors import GeneratorError
from generators import corruptions_cbar as cb


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


NAMES = list(cb.CIFAR_CBAR)
FAST = [n for n in NAMES if n != "circular_motion_blur"]  # its operator takes ~15 s to build


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return natural_images(10, seed=3)


def _draws(name: str, level: int, images: np.ndarray, seed: int = 5) -> list[dict]:
    spec = cb.CIFAR_CBAR[name]
    rngs = cb.image_rngs_for(name, level, seed, len(images))
    constant = spec.constants[level - 1]
    return [spec.sample(rng, img, constant) for rng, img in zip(rngs, images, strict=True)]


def test_registry_matches_the_released_csv() -> None:
    assert len(NAMES) == 10
    assert cb.CBAR_SEVERITIES["sparkles"] == (0.7, 3.5, 5.6, 6.3, 7.0)
    assert cb.CBAR_SEVERITIES["pinch_and_twirl"] == (5.5, 6.0, 6.5, 8.5, 10.0)


@pytest.mark.parametrize("name", FAST)
def test_deterministic_uint8_and_batch_independent(name: str, images: np.ndarray) -> None:
    out = cb.corrupt_bar(images, name, 4, seed=3)
    assert out.dtype == np.uint8 and out.shape == images.shape
    np.testing.assert_array_equal(out, cb.corrupt_bar(images, name, 4, seed=3))
    part = cb.corrupt_bar(images[2:5], name, 4, seed=3, indices=[2, 3, 4])
    np.testing.assert_array_equal(part, out[2:5])
    assert not np.array_equal(out, cb.corrupt_bar(images, name, 4, seed=4))


def _l2(out: np.ndarray, clean: np.ndarray) -> float:
    diff = out.astype(np.float64) - clean.astype(np.float64)
    return float(np.sqrt((diff**2).sum(axis=(1, 2, 3))).mean())


@pytest.mark.parametrize("name", FAST)
def test_severity_monotone_in_l2(name: str) -> None:
    imgs = natural_images(32, seed=1)
    sizes = [_l2(cb.corrupt_bar(imgs, name, s, seed=1), imgs) for s in range(1, 6)]
    assert all(b > a for a, b in itertools.pairwise(sizes)), sizes


@pytest.mark.slow
def test_circular_motion_blur_is_deterministic_ordered_and_matches_scipy_rotate() -> None:
    imgs = natural_images(8, seed=1)
    outs = [cb.corrupt_bar(imgs, "circular_motion_blur", s) for s in range(1, 6)]
    assert all(o.dtype == np.uint8 and o.shape == imgs.shape for o in outs)
    sizes = [_l2(o, imgs) for o in outs]
    assert all(b > a for a, b in itertools.pairwise(sizes)), sizes
    # literal: 21 scipy rotations of the float32 image, Gaussian weights
    amount = cb.float_parameter(2.8, 15)
    x = imgs[0].astype(np.float32) / 255
    acc, weights = np.zeros_like(x), 0.0
    for i in range(21):
        t = 2 * i / 20 - 1
        acc += np.exp(-2 * t**2) * ndimage.rotate(x, t * amount, reshape=False)
        weights += np.exp(-2 * t**2)
    ref = np.clip(acc / weights * 255, 0, 255).astype(np.uint8).astype(int)
    assert np.abs(outs[0][0].astype(int) - ref).max() <= 1


def test_tca_matches_scipy_zoom_per_channel(images: np.ndarray) -> None:
    level = 5
    out = cb.corrupt_bar(images[:3], "transverse_chromatic_abberation", level, seed=5)
    scale = cb.float_parameter(cb.CBAR_SEVERITIES["transverse_chromatic_abberation"][4], 0.5)
    for image, draw, got in zip(
        images[:3], _draws("transverse_chromatic_abberation", level, images[:3]), out, strict=True
    ):
        scales = np.array([1.0, 1.0 + scale / 2, 1.0 + scale])[draw["order"]]
        for c in range(3):
            zoomed = ndimage.zoom(image[:, :, c], scales[c], prefilter=False)
            edge = (zoomed.shape[0] - 32) // 2
            ref = zoomed[edge : edge + 32, edge : edge + 32].astype(int)
            assert np.abs(got[:, :, c].astype(int) - ref).max() <= 1
            assert (got[:, :, c] != ref).mean() < 0.01


def _literal_line_aa(r0: int, c0: int, r1: int, c1: int) -> list[tuple[int, int, float]]:
    """skimage's scalar ``_line_aa`` (float32 err/ed as in its Cython)."""
    f32 = np.float32
    dc, dr = abs(c0 - c1), abs(r0 - r1)
    err = f32(dc - dr)
    sign_c = 1 if c0 < c1 else -1
    sign_r = 1 if r0 < r1 else -1
    ed = f32(1) if dc + dr == 0 else f32(np.sqrt(f32(dc * dc + dr * dr)))
    c, r, pts = c0, r0, []
    while True:
        pts.append((r, c, 1 - abs(float(err - dc + dr)) / float(ed)))
        err_p, c_p = err, c
        if 2 * err_p >= -dc:
            if c == c1:
                break
            if err_p + dr < ed:
                pts.append((r + sign_r, c, 1 - abs(float(err_p + dr)) / float(ed)))
            err = f32(err - dr)
            c += sign_c
        if 2 * err_p <= dr:
            if r == r1:
                break
            if dc - err_p < ed:
                pts.append((r, c_p + sign_c, 1 - abs(float(dc - err_p)) / float(ed)))
            err = f32(err + dc)
            r += sign_r
    return pts


def test_lockstep_line_aa_matches_scalar_algorithm() -> None:
    rng = np.random.default_rng(0)
    ends = rng.integers(-40, 70, size=(60, 4))
    ends[0] = (5, 5, 5, 5)  # a single point
    ids, rr, cc, val = cb._line_aa_batch(*(ends[:, k].copy() for k in range(4)))
    for k, (r0, c0, r1, c1) in enumerate(ends):
        sel = ids == k
        got = list(zip(rr[sel].tolist(), cc[sel].tolist(), val[sel].tolist(), strict=True))
        ref = _literal_line_aa(int(r0), int(c0), int(r1), int(c1))
        assert [(a, b) for a, b, _ in got] == [(a, b) for a, b, _ in ref]
        np.testing.assert_allclose([v for *_, v in got], [v for *_, v in ref], atol=1e-12)


def _bilinear(image: np.ndarray, point: np.ndarray) -> np.ndarray:
    """The paper's ``bilinear_interpolation`` (zero outside the image)."""
    lo, up = int(np.floor(point[0])), int(np.floor(point[1]))
    r, d = lo + 1, up + 1

    def px(a: int, b: int) -> np.ndarray:
        inside = 0 <= a < image.shape[0] and 0 <= b < image.shape[1]
        return image[a, b, :] if inside else np.array([0, 0, 0])

    al = px(lo, up) * (1.0 - point[1] + up) + px(lo, d) * (1.0 - d + point[1])
    ar = px(r, up) * (1.0 - point[1] + up) + px(r, d) * (1.0 - d + point[1])
    return al * (1.0 - point[0] + lo) + ar * (1.0 - r + point[0])


def test_pinch_and_twirl_matches_literal_cell_loop(images: np.ndarray) -> None:
    level = 5
    severity = cb.CBAR_SEVERITIES["pinch_and_twirl"][level - 1]
    out = cb.corrupt_bar(images[:2], "pinch_and_twirl", level, seed=5)
    for image, draw, got in zip(
        images[:2], _draws("pinch_and_twirl", level, images[:2]), out, strict=True
    ):
        angles = draw["signs"] * cb.float_parameter(severity, np.pi / 2)
        amount = cb.float_parameter(severity, 0.4) + 0.1
        res = image.copy().astype(np.float32)
        grid, radius = 10, 5.0
        for i in range(3):
            for j in range(3):
                lo, up = i * grid, j * grid
                centre = np.array([up + radius, lo + radius])
                cell = []  # the whole cell is computed from `res` before it is written
                for y in range(up, up + grid):
                    row = []
                    for x in range(lo, lo + grid):
                        point = np.array([y, x], dtype=float)
                        dx, dy = point - centre
                        dist = np.linalg.norm(point - centre)
                        if dist > radius or np.round(dist, 3) == 0.0:
                            new = point
                        else:
                            d = dist / radius
                            t = np.sin(np.pi * 0.5 * d) ** (-amount)
                            a = angles[i, j] * (1 - d) ** 2
                            dx, dy = dx * t, dy * t
                            new = centre + np.array(
                                [dx * np.cos(a) - dy * np.sin(a), dx * np.sin(a) + dy * np.cos(a)]
                            )
                        row.append(_bilinear(res, new))
                    cell.append(row)
                res[up : up + grid, lo : lo + grid] = np.array(cell)
        ref = np.clip(res, 0, 255).astype(np.uint8)
        np.testing.assert_array_equal(got, ref)


def test_checkerboard_matches_literal_mask_kernel(images: np.ndarray) -> None:
    level = 5
    fraction = cb.float_parameter(cb.CBAR_SEVERITIES["checkerboard_cutout"][level - 1], 1.0)
    out = cb.corrupt_bar(images[:3], "checkerboard_cutout", level, seed=5)
    for image, draw, got in zip(
        images[:3], _draws("checkerboard_cutout", level, images[:3]), out, strict=True
    ):
        n, s, a = int(draw["cells"]), float(draw["scale"]), float(draw["angle"])
        grid = draw["grid"][: n * n].reshape(n, n) < fraction
        ref = image.copy()
        for y in range(32):
            for x in range(32):
                nx = (np.cos(a) * y + np.sin(a) * x) / s
                ny = (-np.sin(a) * y + np.cos(a) * x) / s
                if not ((int(nx % 2) != int(ny % 2)) or not grid[int(nx), int(ny)]):
                    ref[y, x] = 128
        np.testing.assert_array_equal(got, ref)


def test_blue_noise_keeps_a_growing_fraction_of_pixels(images: np.ndarray) -> None:
    kept = [
        (cb.corrupt_bar(images, "blue_noise_sample", s).astype(int) == images).all(-1).mean()
        for s in range(1, 6)
    ]
    # threshold = 0.3 * severity - 2.5 on unit-variance noise: P(noise > t) falls with severity
    assert all(b < a for a, b in itertools.pairwise(kept)), kept


def test_errors(images: np.ndarray) -> None:
    with pytest.raises(GeneratorError, match="corruption='fog'"):
        cb.corrupt_bar(images, "fog", 1)
    with pytest.raises(GeneratorError, match="severity=0"):
        cb.corrupt_bar(images, "lines", 0)
