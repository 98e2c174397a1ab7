"""CIFAR-10/100-C-bar: the 10 corruptions of Mintun et al. (2021), "On Interaction Between
Augmentations and Corruptions in Natural Corruption Robustness", at the CIFAR severities.

Severities are on the paper's 0-10 scale (``float_parameter(s, m) = s * m / 10``); each corruption
has the 5 values of the released ``cifar10_c_bar.csv`` (levels 1..5 here). Every definition
follows the paper's released transforms for 32x32 images (``im_size = 32``), vectorised over the
batch: the per-pixel kernels become array expressions, the per-line and per-cell loops of
``lines`` and ``pinch_and_twirl`` run in lockstep over all images, and the fixed linear maps of
``circular_motion_blur`` and ``transverse_chromatic_abberation`` (scipy rotate/zoom) are built
once as matrices by running scipy on basis images. Randomness comes from per-image streams of
(seed, corruption, level, index); the original's per-call ``np.random`` state is not reproduced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from scipy import ndimage

from generators.corruption_ops import bilinear_sample, round_uint8, stable_matmul, truncate_uint8
from generators.corruption_runs import (
    IMAGE_SIZE,
    Corruption,
    Params,
    check_severity,
    image_rngs,
    run_corruption,
)

SIZE = IMAGE_SIZE
FAMILY = "cifar-c-bar"
CBAR_SEVERITIES: dict[str, tuple[float, ...]] = {
    "blue_noise_sample": (0.7, 1.4, 2.1, 3.5, 4.2),
    "checkerboard_cutout": (1.0, 2.0, 3.0, 4.0, 5.0),
    "inverse_sparkles": (1.0, 1.5, 2.5, 4.5, 5.0),
    "pinch_and_twirl": (5.5, 6.0, 6.5, 8.5, 10.0),
    "ripple": (5.5, 6.0, 6.5, 7.5, 8.0),
    "brownish_noise": (2.5, 4.0, 5.5, 6.5, 7.0),
    "circular_motion_blur": (2.8, 3.6, 4.4, 5.2, 6.0),
    "lines": (0.5, 1.0, 1.5, 2.0, 2.5),
    "sparkles": (0.7, 3.5, 5.6, 6.3, 7.0),
    "transverse_chromatic_abberation": (1.0, 2.0, 5.0, 9.0, 10.0),
}
CIFAR_CBAR: dict[str, Corruption] = {}


def float_parameter(severity: float, maxval: float) -> float:
    """The paper's severity scale: severity 10 reaches ``maxval``."""
    return float(severity) * maxval / 10.0


def _register(
    name: str, sample: Callable[..., Params] | None = None
) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    def wrap(apply: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        CIFAR_CBAR[name] = Corruption(name, CBAR_SEVERITIES[name], apply, sample)
        return apply

    return wrap


def corrupt_bar(
    images: np.ndarray,
    name: str,
    severity: int,
    *,
    seed: int = 0,
    indices: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Apply C-bar corruption ``name`` at level ``severity`` (1..5) to uint8 (N, 32, 32, 3) images.

    Raises:
        GeneratorError: unknown corruption, bad level, bad image array or indices.
    """
    spec = check_severity(name, severity, CIFAR_CBAR)
    if indices is None:
        indices = np.arange(len(images))
    return run_corruption(images, spec, severity, seed=seed, indices=indices, family=FAMILY)


def image_rngs_for(
    name: str, severity: int, seed: int, indices: Sequence[int] | np.ndarray | int
) -> list[np.random.Generator]:
    """The per-image generators ``corrupt_bar`` uses (an int means indices ``0..n-1``)."""
    if isinstance(indices, int):
        indices = np.arange(indices)
    return image_rngs(seed, FAMILY, name, severity, indices)


# --------------------------------------------------------------------------------------------
# spectral noises


def _spectral_noise(phases: np.ndarray, power: np.ndarray) -> np.ndarray:
    """The paper's noise from half-plane phases (..., 32, 16): mirrored phases, given power
    spectrum centred at (16, 16), rolled to the FFT origin, real part of the IFFT, unit std."""
    full = np.concatenate([phases, phases[..., ::-1, ::-1]], axis=-1)
    spectrum = power * (np.cos(full) + 1j * np.sin(full))
    spectrum = np.roll(spectrum, (SIZE // 2, SIZE // 2), axis=(-2, -1))
    noise = np.real(np.fft.ifft2(spectrum))
    return noise / noise.std(axis=(-2, -1), keepdims=True)


def _radius_grid() -> np.ndarray:
    yy, xx = np.meshgrid(np.arange(SIZE), np.arange(SIZE), indexing="ij")
    return np.hypot(xx - SIZE / 2, yy - SIZE / 2)


def _sample_blue(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    return {"phases": rng.uniform(0, 2 * np.pi, size=(SIZE, SIZE // 2))}


@_register("blue_noise_sample", _sample_blue)
def blue_noise_sample(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Keep only pixels where a blue-noise field (power ~ |f|) exceeds a severity threshold."""
    threshold = float_parameter(severity, 3.0) - 2.5
    mask = _spectral_noise(p["phases"], _radius_grid()) > threshold
    return (images * mask[..., None]).astype(np.uint8)


def _sample_brownish(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    return {"phases": rng.uniform(0, 2 * np.pi, size=(3, SIZE, SIZE // 2))}


@_register("brownish_noise", _sample_brownish)
def brownish_noise(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Add per-channel brownish noise (power ~ 1/(|f|^2 + 1)) of std ``severity * 6.4``."""
    intensity = float_parameter(severity, 64)
    noise = _spectral_noise(p["phases"], 1.0 / (_radius_grid() ** 2 + 1))  # (B, 3, H, W)
    return truncate_uint8(np.clip(images + intensity * noise.transpose(0, 2, 3, 1), 0, 255))


# --------------------------------------------------------------------------------------------
# occlusions


GRID_DRAWS = 41 * 41  # the largest checkerboard grid: int(4 * 32 // 3.2) <= 40 cells a side


def _sample_checkerboard(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    angle = rng.uniform(0, 2 * np.pi)
    scale = max(rng.uniform(0.1, 0.25) * SIZE, 1.0)
    return {
        "angle": np.asarray(angle),
        "scale": np.asarray(scale),
        "cells": np.asarray(int(4 * SIZE // scale)),
        "grid": rng.random(GRID_DRAWS),
    }


@_register("checkerboard_cutout", _sample_checkerboard)
def checkerboard_cutout(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Grey out (128) a random fraction of one colour of a rotated checkerboard."""
    fraction = float_parameter(severity, 1.0)
    yy, xx = np.meshgrid(np.arange(SIZE), np.arange(SIZE), indexing="ij")
    cos, sin = np.cos(p["angle"])[:, None, None], np.sin(p["angle"])[:, None, None]
    scale = p["scale"][:, None, None]
    nx = (cos * yy + sin * xx) / scale
    ny = (-sin * yy + cos * xx) / scale
    parity_differs = np.trunc(np.mod(nx, 2)) != np.trunc(np.mod(ny, 2))
    cells = p["cells"][:, None, None]
    ix, iy = np.trunc(nx).astype(np.int64), np.trunc(ny).astype(np.int64)
    ix, iy = np.where(ix < 0, ix + cells, ix), np.where(iy < 0, iy + cells, iy)  # Python indexing
    batch = np.arange(len(images))[:, None, None]
    cut = p["grid"][batch, ix * cells + iy] < fraction  # grid is the first cells^2 draws, row-major
    keep = parity_differs | ~cut
    return np.where(keep[..., None], images, np.uint8(128)).astype(np.uint8)


def _line_aa_batch(
    r0: np.ndarray, c0: np.ndarray, r1: np.ndarray, c1: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """skimage ``line_aa`` (Zingl's anti-aliased line) for many lines in lockstep.

    Returns (line, row, col, value) of every emitted pixel, in each line's emission order.
    """
    dc, dr = np.abs(c0 - c1), np.abs(r0 - r1)
    sign_c, sign_r = np.where(c0 < c1, 1, -1), np.where(r0 < r1, 1, -1)
    ed = np.where(dc + dr == 0, 1.0, np.sqrt((dc * dc + dr * dr).astype(np.float32))).astype(
        np.float32
    )
    ed64 = ed.astype(np.float64)
    err = (dc - dr).astype(np.float32)
    c, r = c0.copy(), r0.copy()
    line_ids = np.arange(len(r0))
    active = np.ones(len(r0), dtype=bool)
    out: list[tuple[np.ndarray, ...]] = []

    def emit(mask: np.ndarray, rows: np.ndarray, cols: np.ndarray, num: np.ndarray) -> None:
        val = 1.0 - np.abs(num.astype(np.float64)) / ed64
        out.append((line_ids[mask], rows[mask], cols[mask], val[mask]))

    while active.any():
        emit(active, r, c, err - dc + dr)
        err_p, c_p = err.copy(), c.copy()
        cond1 = active & (2 * err_p >= -dc)
        stop1 = cond1 & (c == c1)
        step1 = cond1 & ~stop1
        emit(step1 & (err_p + dr < ed), r + sign_r, c, err_p + dr)
        err = np.where(step1, err - dr, err).astype(np.float32)
        c = np.where(step1, c + sign_c, c)
        alive = active & ~stop1
        cond2 = alive & (2 * err_p <= dr)
        stop2 = cond2 & (r == r1)
        step2 = cond2 & ~stop2
        emit(step2 & (dc - err_p < ed), r, c_p + sign_c, dc - err_p)
        err = np.where(step2, err + dc, err).astype(np.float32)
        r = np.where(step2, r + sign_r, r)
        active = alive & ~stop2
    ids, rows, cols, vals = (np.concatenate(parts) for parts in zip(*out, strict=True))
    order = np.argsort(ids, kind="stable")  # group by line, keep emission order
    return ids[order], rows[order], cols[order], vals[order]


def _sample_lines(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    angle = rng.uniform(0.0, 2 * np.pi)
    variation = rng.uniform(0.1, 1.0)
    count = int(float_parameter(severity, 1.0) * SIZE)
    draws = rng.random((count, 3))  # x, y, angle jitter per line, in the original's order
    return {"angle": np.asarray(angle), "variation": np.asarray(variation), "draws": draws}


@_register("lines", _sample_lines)
def lines(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Draw anti-aliased grey (128) lines of half-length 32 through random points, one after
    another, each blended into the uint8 image (truncating, as the original's assignment)."""
    out = images.copy()
    count = p["draws"].shape[1]
    length = float(SIZE)
    for k in range(count):
        x = SIZE * p["draws"][:, k, 0]
        y = SIZE * p["draws"][:, k, 1]
        a = p["angle"] + 2 * np.pi * p["variation"] * (p["draws"][:, k, 2] - 0.5)
        s, c = np.sin(a) * length, np.cos(a) * length
        x1, x2 = np.trunc(x - c).astype(np.int64), np.trunc(x + c).astype(np.int64)
        y1, y2 = np.trunc(y - s).astype(np.int64), np.trunc(y + s).astype(np.int64)
        ids, rr, cc, val = _line_aa_batch(x1, y1, x2, y2)
        inside = (rr >= 0) & (cc >= 0) & (rr < SIZE) & (cc < SIZE)
        ids, rr, cc, val = ids[inside], rr[inside], cc[inside], val[inside]
        old = out[ids, rr, cc].astype(np.float32)
        new = (1.0 - val[:, None]) * old + val[:, None] * 128
        out[ids, rr, cc] = new.astype(np.uint8)  # repeated pixels: the last write wins
    return out


def _ray_kernel(
    value: np.ndarray,
    centre: np.ndarray,
    ray_lengths: np.ndarray,
    rays: np.ndarray,
    exponent: float,
    towards_colour: bool,
) -> np.ndarray:
    """The sparkle kernel for every pixel: a star of rays around ``centre`` (B, 2) with
    per-ray lengths (B, max_rays) of which the first ``rays`` (B,) are used."""
    yy, xx = np.meshgrid(np.arange(SIZE), np.arange(SIZE), indexing="ij")
    dy = yy[None] - centre[:, 0, None, None]
    dx = xx[None] - centre[:, 1, None, None]
    dist = np.hypot(dy, dx)
    angle = np.arctan2(dx, dy)
    n = rays[:, None, None]
    d = (angle + np.pi) / (2 * np.pi) * n
    i = np.floor(d).astype(np.int64)
    f = d - i
    batch = np.arange(len(value))[:, None, None]
    lo = ray_lengths[batch, i % n]
    hi = ray_lengths[batch, (i + 1) % n]
    length = lo + f * (hi - lo)
    g = (length**2 / (dist**2 + 1e-4)) ** exponent
    weight = np.clip((1 - (f - 0.5) ** 2) * g, 0, 1)[..., None]
    colour = 255.0
    if towards_colour:
        return value + weight * (colour - value)
    return colour + weight * (value - colour)


MAX_RAYS = 200


def _padded_rays(
    rng: np.random.Generator, count: int, radius: float, floor: float | None
) -> np.ndarray:
    lengths = np.zeros(MAX_RAYS)
    drawn = radius + 0.25 * radius * rng.standard_normal(count)
    lengths[:count] = drawn if floor is None else np.maximum(floor, drawn)
    return lengths


def _sample_inverse_sparkles(
    rng: np.random.Generator, image: np.ndarray, severity: float
) -> Params:
    centre = rng.uniform(0.25, 0.75, size=2) * SIZE
    rays = int(rng.integers(50, 200))
    return {
        "centre": centre,
        "rays": np.asarray(rays),
        "lengths": _padded_rays(rng, rays, 0.25 * SIZE, None),
    }


@_register("inverse_sparkles", _sample_inverse_sparkles)
def inverse_sparkles(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """White everywhere except a ragged star-shaped window onto the image."""
    amount = 100 - float_parameter(severity, 65)
    value = images.astype(np.float32).astype(np.float64)
    out = _ray_kernel(
        value, p["centre"], p["lengths"], p["rays"], (100 - amount) / 50.0, towards_colour=False
    )
    return truncate_uint8(np.clip(out, 0, 255))


def _sample_sparkles(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    centres = rng.uniform(0, SIZE, size=(5, 2))
    rays = rng.integers(50, 200, size=5)
    radius = float_parameter(severity, 0.1) * SIZE
    lengths = np.stack([_padded_rays(rng, int(n), radius, 1.0) for n in rays])
    return {"centres": centres, "rays": rays, "lengths": lengths}


@_register("sparkles", _sample_sparkles)
def sparkles(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Five white star bursts, composited one after another."""
    value = images.astype(np.float64)
    for k in range(5):
        value = value.astype(np.float32).astype(np.float64)
        value = _ray_kernel(
            value,
            p["centres"][:, k],
            p["lengths"][:, k],
            p["rays"][:, k],
            1.0,
            towards_colour=True,
        )
    return truncate_uint8(np.clip(value, 0, 255))


# --------------------------------------------------------------------------------------------
# geometric distortions


def _sample_pinch(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    return {"signs": rng.choice([1.0, -1.0], size=(3, 3))}


@_register("pinch_and_twirl", _sample_pinch)
def pinch_and_twirl(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """A 3x3 grid of local pinch-and-twirl warps (radius 5), each cell sampled from the image as
    left by the cells before it (column blocks outer, row blocks inner, as in the original)."""
    angles = p["signs"] * float_parameter(severity, np.pi / 2)
    amount = float_parameter(severity, 0.4) + 0.1
    grid, radius = SIZE // 3, (SIZE // 3) / 2
    out = images.astype(np.float32)
    local = np.arange(grid)
    for i in range(3):
        for j in range(3):
            left, up = i * grid, j * grid
            centre = np.array([up + radius, left + radius])
            yy, xx = np.meshgrid(up + local, left + local, indexing="ij")
            dy, dx = yy - centre[0], xx - centre[1]
            dist = np.hypot(dy, dx)
            untouched = (dist > radius) | (np.round(dist, 3) == 0.0)
            d = np.where(untouched, 1.0, dist / radius)
            t = np.sin(np.pi * 0.5 * d) ** (-amount)
            a = angles[:, i, j, None, None] * (1 - d) ** 2
            sy, sx = dy * t, dx * t
            rows = np.where(untouched, yy, centre[0] + sy * np.cos(a) - sx * np.sin(a))
            cols = np.where(untouched, xx, centre[1] + sy * np.sin(a) + sx * np.cos(a))
            vals = bilinear_sample(out.astype(np.float64), rows, cols, border="zero")
            out[:, up : up + grid, left : left + grid] = vals
    return truncate_uint8(np.clip(out, 0, 255))


def _sample_ripple(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    return {
        "wavelengths": rng.uniform(0.1, 0.3, size=2) * SIZE,
        "phases": rng.uniform(0, 2 * np.pi, size=2),
    }


@_register("ripple", _sample_ripple)
def ripple(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Sinusoidal displacement of rows and columns, bilinear with zero outside the image."""
    amp = float_parameter(severity, 0.025) * SIZE
    yy, xx = np.meshgrid(np.arange(SIZE, dtype=np.float64), np.arange(SIZE), indexing="ij")
    wl, ph = p["wavelengths"][:, :, None, None], p["phases"][:, :, None, None]
    rows = yy + amp * np.sin(2 * np.pi * yy / wl[:, 0] + ph[:, 0])
    cols = xx + amp * np.sin(2 * np.pi * xx / wl[:, 1] + ph[:, 1])
    out = bilinear_sample(images.astype(np.float64), rows, cols, border="zero")
    return truncate_uint8(np.clip(out, 0, 255))


@lru_cache(maxsize=8)
def circular_blur_matrix(severity: float) -> np.ndarray:
    """The 21-rotation Gaussian-weighted average (scipy ``rotate``, cubic spline, zero outside)
    as a (1024, 1024) operator on one channel, built by rotating the basis images."""
    amount = float_parameter(severity, 15)
    basis = np.eye(SIZE * SIZE).reshape(SIZE * SIZE, SIZE, SIZE).transpose(1, 2, 0)
    total = np.zeros((SIZE * SIZE, SIZE * SIZE))
    weights = 0.0
    for i in range(21):
        t = 2 * i / 20 - 1
        rotated = ndimage.rotate(basis, t * amount, reshape=False)
        w = float(np.exp(-2 * t**2))
        total += w * rotated.reshape(SIZE * SIZE, SIZE * SIZE)
        weights += w
    total /= weights
    total.setflags(write=False)
    return total


@_register("circular_motion_blur")
def circular_motion_blur(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Blur along circles around the centre: 21 rotations in +-1.5 * severity degrees."""
    n = len(images)
    x = (images / 255.0).transpose(1, 2, 0, 3).reshape(SIZE * SIZE, n * 3)
    out = stable_matmul(circular_blur_matrix(severity), x, scale=255.0, boundary=0.0)
    out = out.reshape(SIZE, SIZE, n, 3).transpose(2, 0, 1, 3)
    return truncate_uint8(np.clip(out * 255, 0, 255))


@lru_cache(maxsize=32)
def tca_zoom_matrix(scale: float) -> np.ndarray:
    """scipy ``zoom(channel, scale, prefilter=False)`` (cubic B-spline, zero outside) cropped to
    the centre 32x32, as a (1024, 1024) operator built from the basis images."""
    cols = []
    for k in range(SIZE * SIZE):
        basis = np.zeros((SIZE, SIZE))
        basis.flat[k] = 1.0
        zoomed = ndimage.zoom(basis, scale, prefilter=False)
        edge = (zoomed.shape[0] - SIZE) // 2
        cols.append(zoomed[edge : edge + SIZE, edge : edge + SIZE].ravel())
    matrix = np.stack(cols, axis=1)
    matrix.setflags(write=False)
    return matrix


def _sample_tca(rng: np.random.Generator, image: np.ndarray, severity: float) -> Params:
    return {"order": rng.permutation(3)}


@_register("transverse_chromatic_abberation", _sample_tca)
def transverse_chromatic_abberation(images: np.ndarray, p: Params, severity: float) -> np.ndarray:
    """Zoom the colour channels by 1, 1 + s/2 and 1 + s (s = severity / 20) in a random order,
    each rounded to uint8 as scipy does for integer output."""
    scale = float_parameter(severity, 0.5)
    scales = np.array([1.0, 1.0 + scale / 2, 1.0 + scale])[p["order"]]  # (B, 3)
    n = len(images)
    out = np.empty_like(images)
    flat = images.astype(np.float64).reshape(n, SIZE * SIZE, 3)
    for value in np.unique(scales):
        matrix = tca_zoom_matrix(float(value))
        b_idx, ch = np.nonzero(scales == value)
        zoomed = stable_matmul(matrix, flat[b_idx, :, ch].T, scale=1.0, boundary=0.5).T
        out[b_idx, :, :, ch] = round_uint8(zoomed).reshape(-1, SIZE, SIZE)
    return out
