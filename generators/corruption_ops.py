"""Numeric primitives the corruptions share, batched over images (numpy / scipy / torch).

uint8 conversions that reproduce the originals' truncation and rounding, Gaussian and one-sided
line motion blur, clipped zoom as a matrix, bilinear sampling with OpenCV / scipy border modes,
the anti-aliased disk of defocus blur, diamond-square plasma and skimage's RGB <-> HSV. Where the
originals call ImageMagick, skimage or OpenCV these are the documented equivalents
(``generators.corruptions_c.EQUIVALENTS``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage

from certbench.errors import GeneratorError


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
