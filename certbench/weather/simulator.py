"""Rain and snow particle simulator (Wang et al., "Evaluating worst case adversarial weather
perturbations robustness", NeurIPS 2022 ML Safety Workshop), differentiable in the particles'
positions and rotations.

Two stages, as in the paper (§4, eq. 2):

1. **Sprite bank** (fixed, seeded): rain streaks of varied length, tilt and width (a Gaussian
   cross-section along a segment with soft end caps); snowflakes from Gaussian noise, smoothed,
   windowed and thresholded, then motion-blurred along a random direction. Sprites are S x S
   (S = 15 px) with their content within radius 6 of the centre, so rotations stay in the tile.
2. **Aggregation**: N particles per image, each a bank sprite ``s_i`` placed by a rotation
   ``R_i`` and a translation ``T_i``. Each sprite is resampled (``grid_sample``, bilinear) on the
   (S+3)^2 output pixels around its centre under the inverse of ``T_i R_i`` and splatted with
   ``scatter_add``, so gradients reach ``T_i`` and ``R_i``. The mask composites the particles as
   ``o = 1 - prod_i (1 - a * s_i)`` (= sum a s_i for sparse particles, and never above 1), and the
   image is ``x' = o + x (1 - o)``, which stays in [0, 1] for x in [0, 1].

Random simulation: 5 severity levels per weather, growing the particle count, the opacity ``a``
and the streak / motion length (``RAIN_LEVELS``, ``SNOW_LEVELS``). Per-image draws (sprite ids,
positions, angles) come from streams keyed by (seed, weather, level, image index)
(:func:`particle_rngs`). The dataset generator (``generators.weather``) and the simulation attack
(``certbench.weather.search``) share this module, so the attack searches exactly the space the
random test sets are drawn from.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage

from certbench.errors import GeneratorError

SPRITE = 15  # sprite tile size in pixels (odd: the centre is a pixel)
CONTENT_RADIUS = 6  # sprite content lies within this radius of the tile centre
# Output pixels a particle can touch: content radius + sqrt(2) of bilinear reach < 7.5, so a
# patch from floor(c) - 8 to floor(c) + 9 covers them for any fractional centre c.
PATCH = SPRITE + 3
BANK_SIZE = 48  # sprites per (weather, level)
FAMILY = "weather"
WEATHERS = ("rain", "snow")
IMAGE_SIZE = 32
CENTRE_MARGIN = 3.0  # particle centres are uniform over the image plus this margin (pixels)


@dataclass(frozen=True)
class WeatherLevel:
    """One severity level: how many particles, how opaque, how long the streaks/motion."""

    count: int
    opacity: float
    length: tuple[float, float]  # rain: streak length; snow: motion-blur length (pixels)
    base_angle: float  # degrees: the level's fall direction spread, U(-base, base) per image
    jitter: float  # degrees: per-particle std around the image's fall direction


RAIN_LEVELS = (
    WeatherLevel(20, 0.35, (3.0, 5.0), 15.0, 3.0),
    WeatherLevel(35, 0.45, (4.0, 7.0), 15.0, 3.0),
    WeatherLevel(55, 0.55, (5.0, 9.0), 20.0, 4.0),
    WeatherLevel(80, 0.65, (6.0, 10.0), 20.0, 4.0),
    WeatherLevel(110, 0.75, (7.0, 11.0), 25.0, 5.0),
)
SNOW_LEVELS = (
    WeatherLevel(15, 0.55, (0.0, 1.0), 30.0, 20.0),
    WeatherLevel(25, 0.65, (0.5, 2.0), 30.0, 20.0),
    WeatherLevel(40, 0.75, (1.0, 3.0), 30.0, 20.0),
    WeatherLevel(60, 0.85, (2.0, 4.0), 30.0, 20.0),
    WeatherLevel(80, 0.95, (3.0, 5.0), 30.0, 20.0),
)
LEVELS = {"rain": RAIN_LEVELS, "snow": SNOW_LEVELS}


def weather_level(kind: str, level: int) -> WeatherLevel:
    """The constants of one (weather, severity); raises GeneratorError for unknown ones."""
    if kind not in LEVELS:
        raise GeneratorError(f"weather={kind!r} is unknown; use rain or snow.")
    if level not in (1, 2, 3, 4, 5):
        raise GeneratorError(f"severity={level!r} is invalid; use an integer 1..5.")
    return LEVELS[kind][level - 1]


# --------------------------------------------------------------------------------------------
# sprite bank


def _tile_coords() -> tuple[np.ndarray, np.ndarray]:
    c = np.arange(SPRITE) - SPRITE // 2
    return np.meshgrid(c, c, indexing="ij")  # rows (y), cols (x), centre at 0


def rain_sprite(length: float, width: float, tilt: float, brightness: float) -> np.ndarray:
    """A streak along the tile's vertical axis (tilted by ``tilt`` radians): Gaussian
    cross-section of std ``width / 2`` and soft (1 px) end caps."""
    yy, xx = _tile_coords()
    along = yy * np.cos(tilt) + xx * np.sin(tilt)
    across = -yy * np.sin(tilt) + xx * np.cos(tilt)
    profile = np.exp(-(across**2) / (2 * (width / 2) ** 2))
    caps = np.clip(length / 2 + 0.5 - np.abs(along), 0, 1)
    return brightness * profile * caps


def snow_sprite(rng: np.random.Generator, motion: float) -> np.ndarray:
    """Thresholded smoothed Gaussian noise under a round window, motion-blurred by ``motion`` px."""
    yy, xx = _tile_coords()
    noise = ndimage.gaussian_filter(rng.standard_normal((SPRITE, SPRITE)), rng.uniform(0.6, 1.2))
    radius = rng.uniform(1.0, 2.2)
    window = np.exp(-(yy**2 + xx**2) / (2 * radius**2))
    field = (noise - noise.min()) / (np.ptp(noise) + 1e-12) * window
    flake = np.where(field > rng.uniform(0.2, 0.45) * field.max(), field, 0.0)
    if motion > 0:
        angle = rng.uniform(0, np.pi)
        steps = np.linspace(-motion / 2, motion / 2, max(2, int(np.ceil(motion * 2)) + 1))
        flake = np.mean(
            [ndimage.shift(flake, (s * np.sin(angle), s * np.cos(angle)), order=1) for s in steps],
            axis=0,
        )
    flake = ndimage.gaussian_filter(flake, 0.5)
    return flake / max(flake.max(), 1e-12)


@lru_cache(maxsize=16)
def sprite_bank(kind: str, level: int) -> torch.Tensor:
    """The fixed bank of ``BANK_SIZE`` sprites (K, 1, S, S) float32 in [0, 1] for a level."""
    spec = weather_level(kind, level)
    rng = np.random.default_rng([0x5EED2, WEATHERS.index(kind), level])
    sprites = []
    for _ in range(BANK_SIZE):
        length = rng.uniform(*spec.length)
        if kind == "rain":
            sprite = rain_sprite(
                min(length, 2 * CONTENT_RADIUS - 1),
                rng.uniform(0.6, 1.4),
                np.deg2rad(rng.normal(0, 3)),
                rng.uniform(0.7, 1.0),
            )
        else:
            sprite = snow_sprite(rng, length)
        sprites.append(sprite)
    yy, xx = _tile_coords()
    inside = (yy**2 + xx**2) <= CONTENT_RADIUS**2  # keep content rotation-safe
    bank = np.stack(sprites) * inside
    return torch.from_numpy(bank[:, None].astype(np.float32))


# --------------------------------------------------------------------------------------------
# differentiable rendering


def render_mask(
    sprites: torch.Tensor,
    sprite_ids: torch.Tensor,
    centres: torch.Tensor,
    angles: torch.Tensor,
    *,
    opacity: float,
    size: int = IMAGE_SIZE,
) -> torch.Tensor:
    """The weather mask o (B, 1, size, size) in [0, 1] for N particles per image.

    Runs on the device of ``centres``; ``scatter_add`` is deterministic on CPU but uses atomics
    (run-to-run float differences) on CUDA.

    Args:
        sprites: (K, 1, S, S) bank.
        sprite_ids: (B, N) long, which sprite each particle shows.
        centres: (B, N, 2) particle centres (row, col) in pixels; differentiable.
        angles: (B, N) rotations in radians; differentiable.
        opacity: the particles' opacity a in [0, 1).
    """
    if not 0.0 <= opacity < 1.0:
        raise GeneratorError(f"opacity={opacity} must be in [0, 1) so that o <= 1 stays smooth.")
    b, n = sprite_ids.shape
    s = sprites.shape[-1]
    patch = s + 3
    half = s // 2
    pad = patch
    device = centres.device
    origin = torch.floor(centres.detach()).long() - (half + 1)  # top-left pixel of each patch
    local = torch.arange(patch, dtype=centres.dtype, device=device)
    # output pixel centres of the patch, relative to the particle centre (pixels)
    rel_r = (origin[..., 0:1] + local[None, None, :]) - centres[..., 0:1]  # (B, N, P)
    rel_c = (origin[..., 1:2] + local[None, None, :]) - centres[..., 1:2]
    rel_r, rel_c = rel_r[..., :, None], rel_c[..., None, :]  # rows (P, 1), columns (1, P)
    cos, sin = torch.cos(angles)[..., None, None], torch.sin(angles)[..., None, None]
    # inverse rotation: sprite coordinates of each output pixel; the products are taken on the
    # P-vectors and broadcast only by the sum (the same values as on expanded P x P grids)
    spr_r = cos * rel_r + sin * rel_c
    spr_c = -sin * rel_r + cos * rel_c
    # grid_sample wants (x, y) normalised to [-1, 1] over the sprite (align_corners=True: centres)
    grid = torch.stack([spr_c / half, spr_r / half], dim=-1).reshape(b * n, patch, patch, 2)
    tiles = sprites[sprite_ids.reshape(-1)]
    values = F.grid_sample(tiles, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    log_clear = torch.log1p(-opacity * values.reshape(b, n * patch * patch).clamp(0, 1))
    canvas = size + 2 * pad
    steps = torch.arange(patch, device=device)
    rows = (origin[..., 0:1] + pad + steps[None, None, :])[..., :, None]
    cols = (origin[..., 1:2] + pad + steps[None, None, :])[..., None, :]
    rows = rows.clamp(0, canvas - 1)
    cols = cols.clamp(0, canvas - 1)
    flat = (rows * canvas + cols).reshape(b, n * patch * patch)
    acc = torch.zeros(b, canvas * canvas, dtype=values.dtype, device=device)
    acc = acc.scatter_add(1, flat, log_clear)
    acc = acc.reshape(b, 1, canvas, canvas)[:, :, pad : pad + size, pad : pad + size]
    return 1.0 - torch.exp(acc)


def composite(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x' = o + x (1 - o): white particles over the image; in [0, 1] when x and o are."""
    return mask + x * (1.0 - mask)


# --------------------------------------------------------------------------------------------
# random draws


@dataclass(frozen=True)
class ParticleDraw:
    """One image's random particles (numpy): the generator's draw, with the angle split into
    the image's fall direction ``base`` and per-particle ``offsets`` (both degrees), which the
    attack's perturbation set bounds separately."""

    ids: np.ndarray  # (N,) int64 sprite ids
    centres: np.ndarray  # (N, 2) float64 (row, col) pixels
    base: float  # degrees, U(-base_angle, base_angle)
    offsets: np.ndarray  # (N,) float64 degrees, N(0, jitter)

    @property
    def angles(self) -> np.ndarray:
        """Radians, exactly as the generator has always computed them."""
        return np.deg2rad(self.base + self.offsets)


def draw_particles(
    rng: np.random.Generator, spec: WeatherLevel, size: int = IMAGE_SIZE
) -> ParticleDraw:
    """One image's particles: sprite ids, centres (uniform with a margin so streaks enter from
    the edges), fall direction and per-particle jitter. The order of the draws is part of the
    published datasets' definition: base, ids, centres, offsets."""
    n = spec.count
    base = rng.uniform(-spec.base_angle, spec.base_angle)
    ids = rng.integers(BANK_SIZE, size=n)
    centres = rng.uniform(-CENTRE_MARGIN, size + CENTRE_MARGIN, size=(n, 2))
    offsets = rng.normal(0, spec.jitter, size=n)
    return ParticleDraw(ids=ids, centres=centres, base=float(base), offsets=offsets)


def sample_particles(rng: np.random.Generator, spec: WeatherLevel, size: int = IMAGE_SIZE) -> dict:
    """One image's particles as the generator uses them: ``ids``, ``centres``, ``angles``
    (radians: image fall direction + per-particle jitter), as numpy arrays."""
    draw = draw_particles(rng, spec, size)
    return {"ids": draw.ids, "centres": draw.centres, "angles": draw.angles}


def _name_word(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def particle_rngs(
    seed: int, kind: str, level: int, indices: Sequence[int] | np.ndarray
) -> list[np.random.Generator]:
    """One numpy generator per image, keyed by (seed, "weather", weather, level, source index):
    the streams of the published random test sets (``certbench generate weather --seed``)."""
    if seed < 0:
        raise GeneratorError(f"seed must be a non-negative integer, got {seed}.")
    base = [int(seed), _name_word(FAMILY), _name_word(kind), int(level)]
    return [np.random.default_rng([*base, int(i)]) for i in np.asarray(indices).tolist()]
