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
  textures (``frost_textures``), cropped at random exactly as the photographs were; measurably
  weaker (``generators.frost``), so the photographs are used when the user supplies them.
- skimage / OpenCV primitives -> scipy.ndimage / numpy equivalents with the same border modes
  (gaussian: mode 'nearest', truncate 4; cv2 BORDER_REFLECT_101 = numpy 'reflect').

Quirks of the original that are reproduced on purpose: outputs are truncated to uint8 (np.uint8 of
a float), glass blur's "swap" is a copy (numpy views alias, so ``a, b = b, a`` copies b into a),
fog's plasma noise uses wibble * U(-wibble, wibble), frost picks among the first 5 textures only.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw
from scipy import ndimage

from certbench.errors import GeneratorError

if TYPE_CHECKING:
    from generators.frost import FrostBank

IMAGE_SIZE = 32
SEVERITIES = (1, 2, 3, 4, 5)
Params = dict[str, np.ndarray]

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


# --------------------------------------------------------------------------------------------
# registry and random streams


@dataclass(frozen=True)
class Corruption:
    """One corruption: severity constants, per-image random draws, and the batched transform."""

    name: str
    constants: tuple[Any, ...]
    apply: Callable[[np.ndarray, Params, Any], np.ndarray]
    sample: Callable[[np.random.Generator, np.ndarray, Any], Params] | None = None


CIFAR_C: dict[str, Corruption] = {}


def _register(
    name: str, constants: Sequence[Any], sample: Callable[..., Params] | None = None
) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    def wrap(apply: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        CIFAR_C[name] = Corruption(name, tuple(constants), apply, sample)
        return apply

    return wrap


def name_word(text: str) -> int:
    """A stable non-negative integer for a name, used as SeedSequence entropy."""
    return zlib.crc32(text.encode("utf-8"))


def image_rngs(
    seed: int, family: str, name: str, level: int, indices: Sequence[int] | np.ndarray
) -> list[np.random.Generator]:
    """One generator per image, keyed by (seed, family, corruption, severity level, index)."""
    if seed < 0:
        raise GeneratorError(f"seed must be a non-negative integer, got {seed}.")
    base = [int(seed), name_word(family), name_word(name), int(level)]
    return [np.random.default_rng([*base, int(i)]) for i in np.asarray(indices).tolist()]


def stack_params(draws: Sequence[Params]) -> Params:
    """Stack per-image draws into batch arrays (every image draws the same shapes)."""
    if not draws:
        return {}
    return {key: np.stack([d[key] for d in draws]) for key in draws[0]}


def check_images(images: np.ndarray) -> np.ndarray:
    """Validate a uint8 (N, 32, 32, 3) batch, the only input the CIFAR constants are made for."""
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        raise GeneratorError(
            "images must be a uint8 numpy array (N, 32, 32, 3), got "
            f"{getattr(images, 'dtype', type(images))}."
        )
    if images.ndim != 4 or images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE, 3):
        raise GeneratorError(
            f"images must have shape (N, 32, 32, 3) (channels last), got {images.shape}; "
            "the CIFAR corruption constants are defined for 32x32 RGB images."
        )
    return images


def check_severity(name: str, severity: int, registry: dict[str, Corruption]) -> Corruption:
    """Look up a corruption and check its 1-based severity level."""
    if name not in registry:
        raise GeneratorError(
            f"corruption={name!r} is unknown; choose one of {', '.join(registry)}."
        )
    if severity not in SEVERITIES:
        raise GeneratorError(f"severity={severity!r} is invalid; use an integer 1..5.")
    return registry[name]


def run_corruption(
    images: np.ndarray,
    spec: Corruption,
    severity: int,
    *,
    seed: int,
    indices: Sequence[int] | np.ndarray,
    family: str,
) -> np.ndarray:
    """Draw each image's parameters from its own stream, then apply the batched transform."""
    images = check_images(images)
    indices = np.asarray(indices, dtype=np.int64)
    if indices.shape != (len(images),):
        raise GeneratorError(
            f"indices must have one entry per image ({len(images)}), got shape {indices.shape}."
        )
    constant = spec.constants[severity - 1]
    params: Params = {}
    if spec.sample is not None:
        rngs = image_rngs(seed, family, spec.name, severity, indices)
        params = stack_params(
            [spec.sample(rng, img, constant) for rng, img in zip(rngs, images, strict=True)]
        )
    out = spec.apply(images, params, constant)
    return np.ascontiguousarray(out, dtype=np.uint8)


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
# shared numeric helpers


def to_unit(images: np.ndarray) -> np.ndarray:
    """uint8 -> float64 in [0, 1], as ``np.array(pil) / 255.`` in the original."""
    return images.astype(np.float64) / 255.0


def truncate_uint8(values: np.ndarray) -> np.ndarray:
    """``np.uint8`` of a float array in [0, 255]: truncation, the original's final step."""
    return np.clip(values, 0, 255).astype(np.uint8)


def round_uint8(values: np.ndarray) -> np.ndarray:
    """Round half up and clip, as ImageMagick and scipy's integer outputs quantise."""
    return np.clip(np.floor(values + 0.5), 0, 255).astype(np.uint8)


def blur_hw(
    x: np.ndarray, sigma: float, *, mode: str = "nearest", truncate: float = 4.0
) -> np.ndarray:
    """Gaussian blur over the spatial axes of (B, H, W[, C]) (skimage ``gaussian`` semantics)."""
    sig = [0.0, sigma, sigma] + [0.0] * (x.ndim - 3)
    return ndimage.gaussian_filter(x, sigma=sig, mode=mode, truncate=truncate)


def line_motion_blur(x: np.ndarray, radius: float, sigma: float, angles: np.ndarray) -> np.ndarray:
    """ImageMagick-equivalent motion blur of (B, H, W, C) floats along per-image angles (degrees).

    The kernel is one-sided: tap i (i = 0 .. 2*ceil(radius)) has weight exp(-i^2 / (2 sigma^2))
    (normalised) and samples the pixel at row + ceil(i sin a - 0.5), column + ceil(i cos a - 0.5),
    clamped to the border (ImageMagick's default edge virtual pixels).
    """
    b, h, w, c = x.shape
    width = int(2 * np.ceil(radius) + 1)
    taps = np.arange(width, dtype=np.float64)
    kernel = np.exp(-(taps**2) / (2.0 * sigma * sigma))
    kernel /= kernel.sum()
    theta = np.deg2rad(np.asarray(angles, dtype=np.float64))
    d_row = np.ceil(taps[None, :] * np.sin(theta)[:, None] - 0.5).astype(np.int64)
    d_col = np.ceil(taps[None, :] * np.cos(theta)[:, None] - 0.5).astype(np.int64)
    # Edge padding is the clamping; images that share a tap's integer offset are shifted together
    # by one slice of the padded batch (a tap has at most ~2i+1 distinct offsets).
    pad = width
    padded = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    out = np.zeros((b, h, w, c))
    for i in range(width):
        pairs, groups = np.unique(
            np.stack([d_row[:, i], d_col[:, i]], 1), axis=0, return_inverse=True
        )
        for g, (dy, dx) in enumerate(pairs):
            members = np.flatnonzero(groups.ravel() == g)
            window = padded[members, pad + dy : pad + dy + h, pad + dx : pad + dx + w]
            out[members] += kernel[i] * window
    return out


@lru_cache(maxsize=64)
def clipped_zoom_matrix(size: int, zoom: float) -> np.ndarray:
    """The 1-D linear operator of the original ``clipped_zoom`` (centre crop, scipy order-1 zoom,
    centre trim) along one axis, built by running scipy's zoom on the identity: ``out = A @ v``."""
    crop = int(np.ceil(size / zoom))
    top = (size - crop) // 2
    basis = np.eye(size)[top : top + crop]
    zoomed = ndimage.zoom(basis, (zoom, 1), order=1)
    trim = (zoomed.shape[0] - size) // 2
    matrix = zoomed[trim : trim + size]
    matrix.setflags(write=False)
    return matrix


def apply_separable(x: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """``A X A^T`` on the spatial axes of (B, H, W) arrays, one image at a time so every image
    goes through identically shaped products (results independent of the batch size)."""
    return np.stack([matrix @ image @ matrix.T for image in x])


def stable_matmul(
    matrix: np.ndarray, x: np.ndarray, *, scale: float, boundary: float
) -> np.ndarray:
    """``matrix @ x`` whose later quantisation cannot depend on the batch size.

    BLAS may sum in a different order for a different number of columns, moving results by an
    ulp. Only values that land within 1e-6 of a quantisation boundary (``y * scale`` at an
    integer + ``boundary``: 0 for truncation, 0.5 for rounding) can flip, so those few are
    recomputed with a fixed-order per-element reduction.
    """
    y = matrix @ x
    z = y * scale
    frac = z - np.floor(z)
    dist = np.abs(frac - boundary)
    if boundary == 0.0:
        dist = np.minimum(dist, 1.0 - frac)
    rows, cols = np.nonzero(dist < 1e-6)
    if len(rows):
        y[rows, cols] = np.einsum("nj,nj->n", matrix[rows], x[:, cols].T)
    return y


def bilinear_sample(
    image: np.ndarray, rows: np.ndarray, cols: np.ndarray, *, border: str
) -> np.ndarray:
    """Bilinear samples of (B, H, W, C) at float (B, H, W) coordinates.

    ``border`` extends the image per neighbour index: 'reflect101' (OpenCV BORDER_REFLECT_101),
    'symmetric' (scipy mode 'reflect'), or 'zero' (out-of-range neighbours read 0). The two
    reflections run as torch ``grid_sample`` (float64), whose reflect-then-clip of coordinates
    gives the same value as reflecting each neighbour index (about pixel centres with
    ``align_corners=True`` for reflect101, about the borders with ``False`` for symmetric).
    """
    if border in ("reflect101", "symmetric"):
        return _grid_sample_reflect(image, rows, cols, align=border == "reflect101")
    b, h, w, _ = image.shape
    r0 = np.floor(rows).astype(np.int64)
    c0 = np.floor(cols).astype(np.int64)
    fr = (rows - r0)[..., None]
    fc = (cols - c0)[..., None]
    batch = np.arange(b)[:, None, None]

    def fetch(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        if border == "zero":
            inside = ((r >= 0) & (r < h) & (c >= 0) & (c < w))[..., None]
            vals = image[batch, np.clip(r, 0, h - 1), np.clip(c, 0, w - 1)]
            return np.where(inside, vals, 0.0)
        return image[batch, _extend(r, h, border), _extend(c, w, border)]

    top = fetch(r0, c0) * (1 - fc) + fetch(r0, c0 + 1) * fc
    bottom = fetch(r0 + 1, c0) * (1 - fc) + fetch(r0 + 1, c0 + 1) * fc
    return top * (1 - fr) + bottom * fr


def _grid_sample_reflect(
    image: np.ndarray, rows: np.ndarray, cols: np.ndarray, *, align: bool
) -> np.ndarray:
    _, h, w, _ = image.shape
    src = torch.from_numpy(np.ascontiguousarray(image.transpose(0, 3, 1, 2), dtype=np.float64))
    if align:  # pixel centres at -1 .. 1
        gx, gy = 2 * cols / (w - 1) - 1, 2 * rows / (h - 1) - 1
    else:  # pixel edges at -1 .. 1
        gx, gy = (2 * cols + 1) / w - 1, (2 * rows + 1) / h - 1
    grid = torch.from_numpy(np.stack([gx, gy], axis=-1).astype(np.float64))
    out = F.grid_sample(src, grid, mode="bilinear", padding_mode="reflection", align_corners=align)
    return out.permute(0, 2, 3, 1).numpy()


def _extend(index: np.ndarray, n: int, border: str) -> np.ndarray:
    if border == "reflect101":
        period = 2 * n - 2
        i = np.mod(index, period)
        return np.where(i >= n, period - i, i)
    if border == "symmetric":
        period = 2 * n
        i = np.mod(index, period)
        return np.where(i >= n, period - 1 - i, i)
    raise GeneratorError(f"border={border!r} is unknown; use 'reflect101', 'symmetric' or 'zero'.")


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


@lru_cache(maxsize=16)
def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """The original's anti-aliased disk: a 17x17 aliased disk blurred by a 3x3 Gaussian
    (cv2.GaussianBlur, BORDER_REFLECT_101), for radius <= 8 as in every CIFAR constant."""
    if radius > 8:
        raise GeneratorError(f"disk radius {radius} > 8 is outside the CIFAR constants.")
    grid = np.arange(-8, 9)
    xx, yy = np.meshgrid(grid, grid)
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-(np.arange(-1, 2) ** 2) / (2.0 * alias_blur**2))
    g /= g.sum()
    padded = np.pad(disk, 1, mode="reflect")
    rows = sum(g[i] * padded[i : i + 17, :] for i in range(3))
    kernel = sum(g[j] * rows[:, j : j + 17] for j in range(3))
    return np.asarray(kernel)


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
    hh, ww = np.meshgrid(coords, coords, indexing="ij")
    hh, ww = hh.ravel(), ww.ravel()
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


FROST_BANK_SIZE = 5
FROST_TEXTURE_SIZE = 192


@lru_cache(maxsize=1)
def frost_textures() -> np.ndarray:
    """The procedural stand-in for the frost photographs: (5, 192, 192, 3) uint8, fixed seed.

    Each texture is a hazy ice sheet (low-pass noise) plus ice dendrites: needles with side
    branches at +-60 degrees (hexagonal ice), drawn with PIL, softened, bluish-white tinted.
    """
    return np.stack([_frost_texture(k) for k in range(FROST_BANK_SIZE)])


def _frost_texture(k: int) -> np.ndarray:
    size = FROST_TEXTURE_SIZE
    rng = np.random.default_rng([0xF2057, k])
    haze = ndimage.gaussian_filter(rng.standard_normal((size, size)), 10, mode="wrap")
    haze = (haze - haze.min()) / (np.ptp(haze) + 1e-12)
    crystals = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(crystals)
    for _ in range(70):
        _draw_dendrite(draw, rng, size)
    layer = ndimage.gaussian_filter(np.asarray(crystals, dtype=np.float64) / 255.0, 0.6)
    grain = ndimage.gaussian_filter(rng.standard_normal((size, size)), 0.8) * 0.05
    frost = np.clip(0.25 + 0.35 * haze + 0.8 * layer + grain, 0, 1)
    tint = np.array([0.86, 0.93, 1.0])
    return (np.clip(frost[..., None] * tint, 0, 1) * 255).astype(np.uint8)


def _draw_dendrite(draw: ImageDraw.ImageDraw, rng: np.random.Generator, size: int) -> None:
    x, y = rng.uniform(0, size, 2)
    angle = rng.uniform(0, 2 * np.pi)
    length = rng.uniform(15, 70)
    shade = int(rng.uniform(110, 255))
    end = (x + length * np.cos(angle), y + length * np.sin(angle))
    draw.line([(x, y), end], fill=shade, width=1)
    for t in np.arange(4.0, length, rng.uniform(3, 7)):
        bx, by = x + t * np.cos(angle), y + t * np.sin(angle)
        branch = (length - t) * rng.uniform(0.15, 0.4)
        for side in (-1, 1):
            a = angle + side * np.pi / 3
            draw.line(
                [(bx, by), (bx + branch * np.cos(a), by + branch * np.sin(a))],
                fill=int(shade * 0.8),
                width=1,
            )


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
    images: np.ndarray, textures: Sequence[np.ndarray], p: Params, c: tuple[float, float]
) -> np.ndarray:
    crops = np.stack(
        [
            textures[k][top : top + IMAGE_SIZE, left : left + IMAGE_SIZE]
            for k, top, left in zip(p["texture"], p["top"], p["left"], strict=True)
        ]
    ).astype(np.float64)
    return truncate_uint8(np.clip(c[0] * images.astype(np.float64) + c[1] * crops, 0, 255))


PLASMA_SIZE = 32
PLASMA_DRAWS = sum(3 * (PLASMA_SIZE // s) ** 2 for s in (32, 16, 8, 4, 2))


def plasma_fractal(draws: np.ndarray, wibbledecay: float, mapsize: int = PLASMA_SIZE) -> np.ndarray:
    """Batched diamond-square heightmaps in [0, 1] from uniform [0, 1) draws (B, 1023).

    Same algorithm and draw order as the original's ``plasma_fractal`` (including its
    ``wibble * U(-wibble, wibble)`` perturbation), with a leading batch axis.
    """
    b = len(draws)
    grid = np.zeros((b, mapsize, mapsize))
    state = {"pos": 0, "wibble": 100.0}

    def wibbled_mean(total: np.ndarray) -> np.ndarray:
        n = total[0].size
        u = draws[:, state["pos"] : state["pos"] + n].reshape(total.shape)
        state["pos"] += n
        w = state["wibble"]
        return total / 4 + w * (-w + 2 * w * u)

    step = mapsize
    while step >= 2:
        half = step // 2
        corners = grid[:, 0:mapsize:step, 0:mapsize:step]
        square = corners + np.roll(corners, -1, axis=1)
        square = square + np.roll(square, -1, axis=2)
        grid[:, half:mapsize:step, half:mapsize:step] = wibbled_mean(square)
        centres = grid[:, half:mapsize:step, half:mapsize:step]
        corners = grid[:, 0:mapsize:step, 0:mapsize:step]
        left = (centres + np.roll(centres, 1, axis=1)) + (corners + np.roll(corners, -1, axis=2))
        grid[:, 0:mapsize:step, half:mapsize:step] = wibbled_mean(left)
        top = (centres + np.roll(centres, 1, axis=2)) + (corners + np.roll(corners, -1, axis=1))
        grid[:, half:mapsize:step, 0:mapsize:step] = wibbled_mean(top)
        step //= 2
        state["wibble"] /= wibbledecay
    grid -= grid.min(axis=(1, 2), keepdims=True)
    return grid / grid.max(axis=(1, 2), keepdims=True)


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


def rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """skimage.color.rgb2hsv on (..., 3) floats (hue in [0, 1), grey pixels get h = s = 0)."""
    v = rgb.max(axis=-1)
    delta = np.ptp(rgb, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(delta == 0, 0.0, delta / v)
        r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
        # skimage assigns red, then green, then blue: later channels win ties
        h = np.where(r == v, (g - b) / delta, 0.0)
        h = np.where(g == v, 2.0 + (b - r) / delta, h)
        h = np.where(b == v, 4.0 + (r - g) / delta, h)
    h = np.where(delta == 0, 0.0, (h / 6.0) % 1.0)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """skimage.color.hsv2rgb on (..., 3) floats."""
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    hi = np.floor(h * 6)
    f = h * 6 - hi
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    sector = hi.astype(np.int64) % 6
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros(hsv.shape)
    for k, (r, g, b) in enumerate(choices):
        mask = sector == k
        out[..., 0] = np.where(mask, r, out[..., 0])
        out[..., 1] = np.where(mask, g, out[..., 1])
        out[..., 2] = np.where(mask, b, out[..., 2])
    return out


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
        pil = Image.fromarray(image).resize((small, small), Image.BOX)
        return np.asarray(pil.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BOX))

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
