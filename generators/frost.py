"""Frost textures for CIFAR-C's frost corruption: the official photographs or the stand-in.

``make_cifar_c.py`` (hendrycks/robustness) reads one of ``frost1.png``, ``frost2.png``,
``frost3.png``, ``frost4.jpg``, ``frost5.jpg`` (``np.random.randint(5)``: ``frost6.jpg`` is never
used) with ``cv2.imread``, shrinks it with ``cv2.resize(frost, (0, 0), fx=0.2, fy=0.2)``, crops a
random 32×32 window (``randint(0, rows − 32)``, ``randint(0, cols − 32)``) and converts BGR to
RGB. The photographs may not be redistributed, so certbench ships a procedural stand-in
(:func:`frost_textures`) and accepts the photographs from the user (``--frost-dir``).

The resize is reproduced exactly without OpenCV: INTER_LINEAR maps output pixel i to source
coordinate (i + 0.5)/0.2 − 0.5 = 5i + 2, an integer, so every weight is 0 or 1 and the output is
the source pixel (5i + 2, 5j + 2); the output size round(0.2·n) equals the count of such pixels.
Pillow decodes the files (RGB directly); for the JPEG photographs its libjpeg may differ from
OpenCV's by ±1 level on some pixels.

The procedural stand-in is measurably weaker: on the same natural crops the mean added intensity
(0..255) at severities 1/3/5 is 24.4/38.7/31.6 against 30.8/52.1/46.4 for the photographs,
21–32 % less (measured for issue 11). Every card built with the stand-in says so.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, UnidentifiedImageError
from scipy import ndimage

from certbench.errors import GeneratorError

PHOTOGRAPHS = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")
"""The five photographs make_cifar_c.py can pick, in its order."""
STEP, OFFSET = 5, 2
"""cv2.resize(fx=0.2, INTER_LINEAR) keeps source pixel STEP·i + OFFSET (see module docstring)."""
CROP = 32

PROCEDURAL_GAP = {1: (24.4, 30.8), 3: (38.7, 52.1), 5: (31.6, 46.4)}
"""Severity -> (procedural, photographs) mean added intensity on the same natural crops."""


@dataclass(frozen=True, eq=False)
class FrostBank:
    """The textures frost crops from: RGB uint8 arrays (rows, cols, 3), in the original's order."""

    kind: str  # "procedural" or "photographs"
    textures: tuple[np.ndarray, ...]
    sha256: str

    def metadata(self) -> dict[str, str]:
        """What a frost config's checksum records, so resumed runs never mix the two banks."""
        return {"frost_textures": self.kind, "frost_sha256": self.sha256}


def procedural_bank() -> FrostBank:
    """The stand-in bank of :func:`frost_textures` (fixed seed)."""
    textures = frost_textures()
    digest = hashlib.sha256(textures.tobytes()).hexdigest()
    return FrostBank("procedural", tuple(textures), digest)


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


def load_photographs(folder: str | Path) -> FrostBank:
    """The official frost photographs from `folder`, shrunk as make_cifar_c.py does.

    ``frost_sha256`` hashes the five files' bytes (in order), so a card pins exactly which
    photographs were used without shipping them.

    Raises:
        GeneratorError: the folder or a file is missing, unreadable, or too small to crop.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise GeneratorError(
            f"--frost-dir {str(folder)!r} is not a folder; point it at the folder holding "
            f"{', '.join(PHOTOGRAPHS)} from hendrycks/robustness (ImageNet-C's frost images)."
        )
    digest = hashlib.sha256()
    textures = []
    for name in PHOTOGRAPHS:
        path = root / name
        if not path.is_file():
            raise GeneratorError(
                f"--frost-dir {str(folder)!r} lacks {name}; it needs {', '.join(PHOTOGRAPHS)}."
            )
        data = path.read_bytes()
        digest.update(hashlib.sha256(data).digest())
        try:
            with Image.open(path) as image:
                pixels = np.asarray(image.convert("RGB"))
        except (UnidentifiedImageError, OSError) as err:
            raise GeneratorError(f"--frost-dir: {name} is not a readable image ({err})") from err
        small = shrink(pixels)
        if min(small.shape[:2]) <= CROP:
            raise GeneratorError(
                f"--frost-dir: {name} is {pixels.shape[1]}×{pixels.shape[0]} pixels; after the "
                f"0.2× resize it must exceed {CROP} pixels per side (the originals do)."
            )
        textures.append(np.ascontiguousarray(small))
    return FrostBank("photographs", tuple(textures), digest.hexdigest())


def shrink(pixels: np.ndarray) -> np.ndarray:
    """cv2.resize(pixels, (0, 0), fx=0.2, fy=0.2) with INTER_LINEAR, exactly (module docstring)."""
    return pixels[OFFSET::STEP, OFFSET::STEP]


def card_note(kind: str, sha256: str = "") -> str:
    """The card's frost paragraph: the photographs' hash, or the stand-in and its measured gap."""
    if kind == "photographs":
        return (
            "**frost** uses the official photographs (frost1–5 of hendrycks/robustness, "
            f"supplied with `--frost-dir`, sha256 of the five files `{sha256}`), shrunk as "
            "`cv2.resize(fx=0.2)` does and cropped at random exactly as the original."
        )
    gap = "; ".join(
        f"severity {s}: {proc} vs {photo} ({1 - proc / photo:.0%} weaker)"
        for s, (proc, photo) in PROCEDURAL_GAP.items()
    )
    return (
        "**frost** uses a procedural stand-in for the photographs, which may not be "
        "redistributed: a fixed bank of 5 generated textures (hazy ice plus hexagonal dendrite "
        "crystals, 192×192, bluish white) cropped at random exactly as the photographs were. "
        "**It is weaker than the original**: mean added intensity (0..255) on the same natural "
        f"crops, stand-in vs photographs, {gap}. Frost results on these sets are not comparable "
        "with the official CIFAR-C; generate with `--frost-dir` (the photographs) or convert the "
        "official release with `certbench import cifar-c`."
    )
