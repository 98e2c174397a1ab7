"""CIFAR-10/100-C: the 15 corruptions of Hendrycks & Dietterich (2019) with the CIFAR constants.

Each corruption follows ``make_cifar_c.py`` of hendrycks/robustness operation by operation, but
runs on a whole batch at once (numpy/torch/scipy), and draws its randomness from a per-image
stream derived from (seed, corruption, severity, image index), so the output is independent of
batch size and any image can be regenerated alone. The original's random draws become an explicit
``sample`` step per image; ``apply`` is the deterministic batched part.

Where the original depends on software we cannot use, documented equivalents stand in (also
written into the dataset card, see ``EQUIVALENTS``):

- ImageMagick ``MotionBlurImage`` (motion_blur, snow) -> the same one-sided line kernel rebuilt in
  numpy: ``2*ceil(radius)+1`` taps with half-Gaussian weights exp(-i^2/2 sigma^2), tap i sampled at
  offset (ceil(i sin a - 0.5), ceil(i cos a - 0.5)) with edge replication, rounded to uint8.
- The frost photographs (not redistributable) -> a fixed bank of 5 procedurally generated frost
  textures (``generators.frost.frost_textures``), cropped at random exactly as the photographs
  were; measurably weaker (``generators.frost``), so the photographs are used when the user
  supplies them.
- skimage / OpenCV primitives -> scipy.ndimage / numpy equivalents with the same border modes
  (gaussian: mode 'nearest', truncate 4; cv2 BORDER_REFLECT_101 = numpy 'reflect').

Quirks of the original that are reproduced on purpose: outputs are truncated to uint8 (np.uint8 of
a float), glass blur's "swap" is a copy (numpy views alias, so ``a, b = b, a`` copies b into a),
fog's plasma noise uses wibble * U(-wibble, wibble), frost picks among the first 5 textures only.

The corruption type and per-image streams live in ``generators.corruption_runs``, the numeric
primitives shared with CIFAR-C-bar in ``generators.corruption_ops``; this module holds the 15
corruptions and their registry ``CIFAR_C``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image
from scipy import ndimage

from certbench.errors import GeneratorError
from generators.corruption_ops import (
    PLASMA_DRAWS,
    apply_separable,
    bilinear_sample,
    blur_hw,
    clipped_zoom_matrix,
    disk_kernel,
    hsv_to_rgb,
    line_motion_blur,
    plasma_fractal,
    rgb_to_hsv,
    round_uint8,
    stable_matmul,
    to_unit,
    truncate_uint8,
)
from generators.corruption_runs import (
    IMAGE_SIZE,
    Corruption,
    Params,
    check_severity,
    run_corruption,
)
from generators.frost import FROST_BANK_SIZE, FROST_TEXTURE_SIZE, frost_textures

if TYPE_CHECKING:
    from generators.frost import FrostBank


EQUIVALENTS = {
    "motion_blur": (
        "ImageMagick's MotionBlurImage is replaced by the same one-sided line kernel in numpy "
        "(2*radius+1 taps, half-Gaussian weights exp(-i^2/(2 sigma^2)), tap i at offset "
        "(ceil(i sin a - 0.5), ceil(i cos a - 0.5)), edge replication, rounding to uint8)."
    ),
    "snow": "The snow layer's ImageMagick motion blur uses the same numpy line kernel.",
    "frost": (
        "The frost photographs of the original may not be redistributed; a fixed bank of 5 "
        "procedurally generated frost textures (hazy ice plus hexagonal dendrite crystals, "
        "192x192, bluish white) is cropped at random exactly as the photographs were."
    ),
}


CIFAR_C: dict[str, Corruption] = {}


def _register(
    name: str, constants: Sequence[Any], sample: Callable[..., Params] | None = None
) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    def wrap(apply: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        CIFAR_C[name] = Corruption(name, tuple(constants), apply, sample)
        return apply

    return wrap


def corrupt(
    images: np.ndarray,
    name: str,
    severity: int,
    *,
    seed: int = 0,
    indices: Sequence[int] | np.ndarray | None = None,
    frost_bank: FrostBank | None = None,
) -> np.ndarray:
    """Apply CIFAR-C corruption ``name`` at ``severity`` (1..5) to uint8 ``(N, 32, 32, 3)`` images.

    ``indices`` are the images' positions in the source split (default ``0..N-1``); together with
    ``seed`` they fix every random draw, so results do not depend on how images are batched.
    ``frost_bank``: the official photographs (``generators.frost.load_photographs``) for frost;
    default the procedural stand-in.

    Raises:
        GeneratorError: unknown corruption, bad severity, bad image array or indices.
    """
    spec = check_severity(name, severity, CIFAR_C)
    if name == "frost" and frost_bank is not None and frost_bank.kind != "procedural":
        spec = photograph_frost(frost_bank)
    if indices is None:
        indices = np.arange(len(images))
    return run_corruption(images, spec, severity, seed=seed, indices=indices, family="cifar-c")


# --------------------------------------------------------------------------------------------
# noise


def _sample_gaussian(rng: np.random.Generator, image: np.ndarray, c: float) -> Params:
    return {"z": rng.standard_normal(image.shape)}


@_register("gaussian_noise", (0.04, 0.06, 0.08, 0.09, 0.10), _sample_gaussian)
def gaussian_noise(images: np.ndarray, p: Params, c: float) -> np.ndarray:
    """x + N(0, c^2) per pixel and channel, clipped."""
    return truncate_uint8(np.clip(to_unit(images) + c * p["z"], 0, 1) * 255)


def _sample_shot(rng: np.random.Generator, image: np.ndarray, c: float) -> Params:
    return {"counts": rng.poisson(image.astype(np.float64) / 255.0 * c).astype(np.float64)}


@_register("shot_noise", (500, 250, 100, 75, 50), _sample_shot)
def shot_noise(images: np.ndarray, p: Params, c: float) -> np.ndarray:
    """Poisson(x * c) / c: photon noise whose variance is x / c."""
    return truncate_uint8(np.clip(p["counts"] / c, 0, 1) * 255)


def _sample_impulse(rng: np.random.Generator, image: np.ndarray, c: float) -> Params:
    return {"flip": rng.random(image.shape), "salt": rng.random(image.shape)}


@_register("impulse_noise", (0.01, 0.02, 0.03, 0.05, 0.07), _sample_impulse)
def impulse_noise(images: np.ndarray, p: Params, c: float) -> np.ndarray:
    """Salt and pepper per channel value (skimage 's&p'): P(255) = P(0) = amount / 2."""
    x = to_unit(images)
    flipped = p["flip"] < c
    x = np.where(flipped & (p["salt"] < 0.5), 1.0, x)
    x = np.where(flipped & (p["salt"] >= 0.5), 0.0, x)
    return truncate_uint8(np.clip(x, 0, 1) * 255)


# --------------------------------------------------------------------------------------------
# blur


@_register("defocus_blur", ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)))
def defocus_blur(images: np.ndarray, p: Params, c: tuple[float, float]) -> np.ndarray:
    """Correlation with the anti-aliased disk, BORDER_REFLECT_101 (cv2.filter2D default).

    The kernel's all-zero border rows/columns are trimmed first (same result, far fewer taps).
    """
    kernel = disk_kernel(*c)
    keep = np.flatnonzero(kernel.any(axis=0))
    lo, hi = keep.min(), keep.max() + 1
    kernel = kernel[lo:hi, lo:hi]  # symmetric about the centre, so the trim stays centred
    y = ndimage.correlate(to_unit(images), kernel[None, :, :, None], mode="mirror")
    return truncate_uint8(np.clip(y, 0, 1) * 255)


def _sample_glass(rng: np.random.Generator, image: np.ndarray, c: tuple) -> Params:
    _, max_delta, iterations = c
    positions = (IMAGE_SIZE - 2 * max_delta) ** 2
    # one (dx, dy) pair per visited pixel, in the original's loop order
    return {"shifts": rng.integers(-max_delta, max_delta, size=(iterations, positions, 2))}


@_register(
    "glass_blur",
    ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
    _sample_glass,
)
def glass_blur(images: np.ndarray, p: Params, c: tuple[float, int, int]) -> np.ndarray:
    """Gaussian blur, local pixel "shuffle", Gaussian blur.

    The original visits h, w = 31..2 (descending) and runs ``x[h,w], x[h',w'] = x[h',w'], x[h,w]``
    on numpy views, which copies x[h',w'] into x[h,w] (the second assignment writes back the value
    just copied). With max_delta = 1 the offsets are in {-1, 0}, so every source pixel is read
    before it is written and one iteration is exactly a parallel gather.
    """
    sigma, max_delta, iterations = c
    if max_delta != 1:
        raise GeneratorError(
            "glass_blur's parallel form holds for max_delta = 1 (all CIFAR constants)."
        )
    x = truncate_uint8(blur_hw(to_unit(images), sigma) * 255)
    lo, hi = max_delta, IMAGE_SIZE - max_delta  # visited rows/cols: hi .. lo+1
    coords = np.arange(hi, lo, -1)
    hh, ww = (grid.ravel() for grid in np.meshgrid(coords, coords, indexing="ij"))
    batch = np.arange(len(images))[:, None]
    for it in range(iterations):
        dx, dy = p["shifts"][:, it, :, 0], p["shifts"][:, it, :, 1]
        src = x[batch, hh[None, :] + dy, ww[None, :] + dx]
        x = x.copy()
        x[batch, hh[None, :], ww[None, :]] = src
    return truncate_uint8(np.clip(blur_hw(x / 255.0, sigma), 0, 1) * 255)


def _sample_motion(rng: np.random.Generator, image: np.ndarray, c: tuple) -> Params:
    return {"angle": np.asarray(rng.uniform(-45, 45))}


@_register("motion_blur", ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)), _sample_motion)
def motion_blur(images: np.ndarray, p: Params, c: tuple[float, float]) -> np.ndarray:
    """ImageMagick-equivalent line motion blur at angle U(-45, 45), quantised by rounding."""
    return round_uint8(line_motion_blur(images.astype(np.float64), c[0], c[1], p["angle"]))


ZOOM_FACTORS = tuple(
    tuple(float(z) for z in np.arange(1, stop, 0.01)) for stop in (1.06, 1.11, 1.16, 1.21, 1.26)
)


@lru_cache(maxsize=8)
def zoom_blur_matrix(factors: tuple[float, ...]) -> np.ndarray:
    """(x + sum_z clipped_zoom(x, z)) / (n + 1) as one 1024x1024 operator on a 32x32 channel."""
    eye = np.eye(IMAGE_SIZE * IMAGE_SIZE)
    total = eye.copy()
    for z in factors:
        a = clipped_zoom_matrix(IMAGE_SIZE, z)
        total += np.kron(a, a)
    total /= len(factors) + 1
    total.setflags(write=False)
    return total


@_register("zoom_blur", ZOOM_FACTORS)
def zoom_blur(images: np.ndarray, p: Params, c: tuple[float, ...]) -> np.ndarray:
    """Average of the image and its centre zooms by every factor (scipy order-1 zoom)."""
    n = len(images)
    x = to_unit(images).transpose(1, 2, 0, 3).reshape(IMAGE_SIZE * IMAGE_SIZE, n * 3)
    y = stable_matmul(zoom_blur_matrix(c), x, scale=255.0, boundary=0.0)
    y = y.reshape(IMAGE_SIZE, IMAGE_SIZE, n, 3).transpose(2, 0, 1, 3)
    return truncate_uint8(np.clip(y, 0, 1) * 255)


# --------------------------------------------------------------------------------------------
# weather


def _sample_snow(rng: np.random.Generator, image: np.ndarray, c: tuple) -> Params:
    layer = rng.normal(loc=c[0], scale=c[1], size=(IMAGE_SIZE, IMAGE_SIZE))
    return {"layer": layer, "angle": np.asarray(rng.uniform(-135, -45))}


@_register(
    "snow",
    (
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    ),
    _sample_snow,
)
def snow(images: np.ndarray, p: Params, c: tuple) -> np.ndarray:
    """Zoomed, thresholded Gaussian snow layer, motion-blurred, added twice (and rotated 180
    degrees) over a greyed-out, brightened image."""
    loc, scale, zoom, threshold, radius, sigma, mix = c
    del loc, scale
    x = to_unit(images)
    layer = apply_separable(p["layer"], clipped_zoom_matrix(IMAGE_SIZE, zoom))
    layer = np.where(layer < threshold, 0.0, layer)
    layer8 = (np.clip(layer, 0, 1) * 255).astype(np.uint8).astype(np.float64)
    blurred = round_uint8(line_motion_blur(layer8[..., None], radius, sigma, p["angle"])) / 255.0
    gray = (x @ np.array([0.299, 0.587, 0.114]))[..., None]
    x = mix * x + (1 - mix) * np.maximum(x, gray * 1.5 + 0.5)
    return truncate_uint8(np.clip(x + blurred + blurred[:, ::-1, ::-1], 0, 1) * 255)


def _sample_frost(rng: np.random.Generator, image: np.ndarray, c: tuple) -> Params:
    idx = rng.integers(FROST_BANK_SIZE)
    top, left = rng.integers(0, FROST_TEXTURE_SIZE - IMAGE_SIZE, size=2)
    return {"texture": np.asarray(idx), "top": np.asarray(top), "left": np.asarray(left)}


@_register("frost", ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)), _sample_frost)
def frost(images: np.ndarray, p: Params, c: tuple[float, float]) -> np.ndarray:
    """c0 * x + c1 * (random 32x32 crop of a frost texture), in 0..255 units."""
    return _blend_frost(images, frost_textures(), p, c)


def photograph_frost(bank: FrostBank) -> Corruption:
    """Frost on the official photographs: the original's draws (texture, then row and column
    offsets within that photograph's own size) and blend."""
    sizes = [texture.shape[:2] for texture in bank.textures]

    def sample(rng: np.random.Generator, image: np.ndarray, c: tuple) -> Params:
        idx = int(rng.integers(len(sizes)))
        rows, cols = sizes[idx]
        top = rng.integers(0, rows - IMAGE_SIZE)
        left = rng.integers(0, cols - IMAGE_SIZE)
        return {"texture": np.asarray(idx), "top": np.asarray(top), "left": np.asarray(left)}

    def apply(images: np.ndarray, p: Params, c: tuple[float, float]) -> np.ndarray:
        return _blend_frost(images, bank.textures, p, c)

    return Corruption("frost", CIFAR_C["frost"].constants, apply, sample)


def _blend_frost(
    images: np.ndarray,
    textures: np.ndarray | Sequence[np.ndarray],
    p: Params,
    c: tuple[float, float],
) -> np.ndarray:
    crops = np.stack(
        [
            textures[k][top : top + IMAGE_SIZE, left : left + IMAGE_SIZE]
            for k, top, left in zip(p["texture"], p["top"], p["left"], strict=True)
        ]
    ).astype(np.float64)
    return truncate_uint8(np.clip(c[0] * images.astype(np.float64) + c[1] * crops, 0, 255))


def _sample_fog(rng: np.random.Generator, image: np.ndarray, c: tuple) -> Params:
    return {"u": rng.random(PLASMA_DRAWS)}


@_register("fog", ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)), _sample_fog)
def fog(images: np.ndarray, p: Params, c: tuple[float, float]) -> np.ndarray:
    """x + c0 * plasma fractal, rescaled by max / (max + c0)."""
    x = to_unit(images)
    max_val = x.max(axis=(1, 2, 3), keepdims=True)
    x = x + c[0] * plasma_fractal(p["u"], c[1])[..., None]
    return truncate_uint8(np.clip(x * max_val / (max_val + c[0]), 0, 1) * 255)


# --------------------------------------------------------------------------------------------
# digital


@_register("brightness", (0.05, 0.1, 0.15, 0.2, 0.3))
def brightness(images: np.ndarray, p: Params, c: float) -> np.ndarray:
    """Raise HSV value by c (clipped at 1), hue and saturation unchanged."""
    hsv = rgb_to_hsv(to_unit(images))
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
    return truncate_uint8(np.clip(hsv_to_rgb(hsv), 0, 1) * 255)


@_register("contrast", (0.75, 0.5, 0.4, 0.3, 0.15))
def contrast(images: np.ndarray, p: Params, c: float) -> np.ndarray:
    """Shrink each channel towards its image mean by the factor c."""
    x = to_unit(images)
    means = x.mean(axis=(1, 2), keepdims=True)
    return truncate_uint8(np.clip((x - means) * c + means, 0, 1) * 255)


def _sample_elastic(rng: np.random.Generator, image: np.ndarray, c: tuple) -> Params:
    return {
        "affine": rng.uniform(-c[2], c[2], size=(3, 2)),
        "dx": rng.uniform(-1, 1, size=(IMAGE_SIZE, IMAGE_SIZE)),
        "dy": rng.uniform(-1, 1, size=(IMAGE_SIZE, IMAGE_SIZE)),
    }


@_register(
    "elastic_transform",
    tuple(
        (IMAGE_SIZE * a, IMAGE_SIZE * b, IMAGE_SIZE * s)
        for a, b, s in (
            (0, 0, 0.08),
            (0.05, 0.2, 0.07),
            (0.08, 0.06, 0.06),
            (0.1, 0.04, 0.05),
            (0.1, 0.03, 0.03),
        )
    ),
    _sample_elastic,
)
def elastic_transform(images: np.ndarray, p: Params, c: tuple[float, float, float]) -> np.ndarray:
    """Random affine warp (3 jittered points, cv2.warpAffine semantics, BORDER_REFLECT_101),
    then a smooth random displacement field (Gaussian-filtered U(-1, 1) * alpha, bilinear,
    scipy mode 'reflect')."""
    alpha, sigma, _ = c
    n = len(images)
    x = to_unit(images)
    centre = np.float32(IMAGE_SIZE) // 2
    square = IMAGE_SIZE // 3
    pts1 = np.array(
        [
            [centre + square, centre + square],
            [centre + square, centre - square],
            [centre - square, centre - square],
        ],
        dtype=np.float64,
    )
    pts2 = pts1[None] + p["affine"].astype(np.float32).astype(np.float64)
    # forward map M: [x, y, 1] of pts1 -> pts2; warpAffine samples src at M^-1 (dst)
    design = np.concatenate([pts1, np.ones((3, 1))], axis=1)
    forward = np.linalg.solve(design[None].repeat(n, 0), pts2).transpose(0, 2, 1)  # (n, 2, 3)
    full = np.concatenate([forward, np.tile([[[0.0, 0.0, 1.0]]], (n, 1, 1))], axis=1)
    inverse = np.linalg.inv(full)
    yy, xx = np.meshgrid(np.arange(IMAGE_SIZE), np.arange(IMAGE_SIZE), indexing="ij")
    grid = np.stack([xx.ravel(), yy.ravel(), np.ones(xx.size)])
    src = inverse[:, :2] @ grid  # (n, 2, HW): source x (col), y (row)
    cols = src[:, 0].reshape(n, IMAGE_SIZE, IMAGE_SIZE)
    rows = src[:, 1].reshape(n, IMAGE_SIZE, IMAGE_SIZE)
    warped = bilinear_sample(x, rows, cols, border="reflect101")
    dx = blur_hw(p["dx"], sigma, mode="reflect", truncate=3) * alpha
    dy = blur_hw(p["dy"], sigma, mode="reflect", truncate=3) * alpha
    out = bilinear_sample(warped, yy[None] + dy, xx[None] + dx, border="symmetric")
    return truncate_uint8(np.clip(out, 0, 1) * 255)


@_register("pixelate", (0.95, 0.9, 0.85, 0.75, 0.65))
def pixelate(images: np.ndarray, p: Params, c: float) -> np.ndarray:
    """PIL BOX resize down to int(32 c) and back up to 32, with Pillow itself (one call per
    image: a batched fixed-point emulation was bit-exact but slower than Pillow's C code)."""
    small = int(IMAGE_SIZE * c)

    def one(image: np.ndarray) -> np.ndarray:
        pil = Image.fromarray(image).resize((small, small), Image.Resampling.BOX)
        return np.asarray(pil.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BOX))

    return np.stack([one(image) for image in images])


def _jpeg_roundtrip(image: np.ndarray, quality: int) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="RGB").save(buffer, "JPEG", quality=quality)
    buffer.seek(0)
    with Image.open(buffer) as decoded:
        return np.asarray(decoded)  # libjpeg decodes a 3-channel JPEG as RGB


@_register("jpeg_compression", (80, 65, 58, 50, 40))
def jpeg_compression(images: np.ndarray, p: Params, c: int) -> np.ndarray:
    """PIL JPEG encode at quality c and decode (libjpeg itself: no batched equivalent exists)."""
    return np.stack([_jpeg_roundtrip(image, c) for image in images])
