"""The perturbation set Δ of the simulation attack (Wang et al., NeurIPS 2022 ML Safety Workshop,
§3–4): what the attack may change.

Wang et al. attack only the simulator's differentiable aggregation parameters, each particle's
translation T_i and rotation R_i (eq. 2: ``o = Σ s_i R_i T_i``), "constrained in some given
perturbation set" that the paper leaves unspecified. Here Δ is the set the random generator
(``certbench.weather.simulator.draw_particles``, the published random test sets) samples from, so an
attack finds the worst case of exactly the weather the random sets show. For weather ``w`` at
severity ``s`` with constants ``L = LEVELS[w][s-1]`` and 32x32 images:

- **count**: exactly ``L.count`` particles (rain 20/35/55/80/110, snow 15/25/40/60/80); not
  attacked (the paper fixes N).
- **sprites and sizes**: each particle shows a sprite of the level's fixed 48-sprite bank (rain
  streak length ``L.length``, width 0.6–1.4 px, tilt N(0°, 3°); snowflake radius 1–2.2 px,
  motion blur ``L.length``), drawn uniformly per particle and then fixed: sprite choice is
  discrete and not a parameter of R_i or T_i. Opacity ``L.opacity`` is fixed too.
- **translation** T_i: centre (row, col) ∈ [−3, 35]² pixels, the generator's uniform range
  (image plus a 3 px margin so streaks enter from the edges).
- **rotation** R_i: angle θ_i = β + δ_i with the image's fall direction β ∈ [−L.base_angle,
  L.base_angle] and per-particle offset δ_i ∈ [−k·L.jitter, k·L.jitter], k = ``TRUNCATION`` = 3.
  The generator draws δ_i ~ N(0, L.jitter), whose support is unbounded, so Δ truncates it at
  3σ (0.27 % of random particles fall outside and are clipped onto the bound when a random draw
  starts the attack). Equivalently Δ's angles are the θ ∈ ℝ^N with max θ − min θ ≤ 2k·jitter and
  [max θ − k·jitter, min θ + k·jitter] ∩ [−base_angle, base_angle] ≠ ∅: streaks stay roughly
  parallel, as in the random sets, instead of each turning freely.

The attack's parameters are (centres, β, δ): Δ is a box in them, so the projection is a clamp
(exact, Euclidean) and membership is checked exactly on every output (:meth:`WeatherSet.check`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from certbench.errors import ThreatModelError
from certbench.smoothing import derive_seed
from certbench.weather.simulator import (
    BANK_SIZE,
    CENTRE_MARGIN,
    IMAGE_SIZE,
    LEVELS,
    composite,
    draw_particles,
    particle_rngs,
    render_mask,
    sprite_bank,
    weather_level,
)

TRUNCATION = 3.0
"""Per-particle angle offsets are bounded at TRUNCATION × the level's jitter (its N(0, σ) std)."""


@dataclass(frozen=True)
class Particles:
    """A batch of particle configurations: the attack's variables and the fixed sprite ids.

    ``ids`` (B, N) long; ``centres`` (B, N, 2) pixels (row, col); ``base`` (B,) radians, the
    image's fall direction β; ``offsets`` (B, N) radians, each particle's δ_i.
    """

    ids: torch.Tensor
    centres: torch.Tensor
    base: torch.Tensor
    offsets: torch.Tensor

    @property
    def angles(self) -> torch.Tensor:
        """θ_i = β + δ_i (B, N) radians, the rotation of R_i."""
        return self.base[:, None] + self.offsets

    def detach(self) -> Particles:
        return Particles(self.ids, self.centres.detach(), self.base.detach(), self.offsets.detach())

    def select(self, rows: torch.Tensor) -> Particles:
        """The configurations of some images (boolean mask or index tensor)."""
        return Particles(self.ids[rows], self.centres[rows], self.base[rows], self.offsets[rows])

    def to(self, device: torch.device | str) -> Particles:
        return Particles(
            self.ids.to(device),
            self.centres.to(device),
            self.base.to(device),
            self.offsets.to(device),
        )

    def where(self, take: torch.Tensor, other: Particles) -> Particles:
        """Row-wise choice: ``self`` where ``take`` (B,) is true, else ``other``."""
        return Particles(
            torch.where(take[:, None], self.ids, other.ids),
            torch.where(take[:, None, None], self.centres, other.centres),
            torch.where(take, self.base, other.base),
            torch.where(take[:, None], self.offsets, other.offsets),
        )

    @staticmethod
    def cat(parts: Sequence[Particles]) -> Particles:
        return Particles(
            torch.cat([p.ids for p in parts]),
            torch.cat([p.centres for p in parts]),
            torch.cat([p.base for p in parts]),
            torch.cat([p.offsets for p in parts]),
        )


@dataclass(frozen=True)
class WeatherSet:
    """Δ for one weather and severity (see the module docstring); angles in radians."""

    weather: str
    severity: int
    count: int
    opacity: float
    centre_low: float
    centre_high: float
    base_limit: float
    offset_limit: float

    @classmethod
    def for_level(cls, weather: str, severity: int, truncation: float = TRUNCATION) -> WeatherSet:
        """Δ of the random generator's level, offsets truncated at ``truncation`` × jitter.

        Raises:
            GeneratorError: unknown weather or severity.
            ThreatModelError: a non-positive truncation.
        """
        spec = weather_level(weather, severity)
        if not truncation > 0:
            raise ThreatModelError(
                f"truncation={truncation} must be positive (the default is {TRUNCATION})."
            )
        return cls(
            weather=weather,
            severity=severity,
            count=spec.count,
            opacity=spec.opacity,
            centre_low=-CENTRE_MARGIN,
            centre_high=IMAGE_SIZE + CENTRE_MARGIN,
            base_limit=math.radians(spec.base_angle),
            offset_limit=math.radians(truncation * spec.jitter),
        )

    @property
    def name(self) -> str:
        """``rain-3``: the unit a record and a summary row refer to."""
        return f"{self.weather}-{self.severity}"

    def project(self, p: Particles) -> Particles:
        """Euclidean projection onto Δ (a box in the attack's variables: a clamp)."""
        return Particles(
            p.ids,
            p.centres.clamp(self.centre_low, self.centre_high),
            p.base.clamp(-self.base_limit, self.base_limit),
            p.offsets.clamp(-self.offset_limit, self.offset_limit),
        )

    def violations(self, p: Particles) -> list[str]:
        """Why ``p`` is not in Δ (empty if it is): checked exactly, no tolerance."""
        found: list[str] = []
        b = p.ids.shape[0]
        if p.ids.shape != (b, self.count) or p.offsets.shape != (b, self.count):
            found.append(f"{tuple(p.ids.shape)} particles instead of (B, {self.count})")
            return found
        if p.centres.shape != (b, self.count, 2) or p.base.shape != (b,):
            found.append(f"centres {tuple(p.centres.shape)} / base {tuple(p.base.shape)}")
            return found
        if bool(((p.ids < 0) | (p.ids >= BANK_SIZE)).any()):
            found.append(f"sprite ids outside [0, {BANK_SIZE})")
        checks = (  # (what, values, low, high, unit, factor to the unit)
            ("centres", p.centres, self.centre_low, self.centre_high, "px", 1.0),
            ("fall direction", p.base, -self.base_limit, self.base_limit, "°", 180 / math.pi),
            ("angle offsets", p.offsets, -self.offset_limit, self.offset_limit, "°", 180 / math.pi),
        )
        for what, values, low, high, unit, k in checks:
            outside = ~((values >= low) & (values <= high))  # NaN counts as outside
            if bool(outside.any()):
                bad = values[outside].flatten()[0].item() * k
                found.append(
                    f"{what} outside [{low * k:.6g}, {high * k:.6g}] {unit} (e.g. {bad:.6g})"
                )
        return found

    def check(self, p: Particles, what: str = "particles") -> Particles:
        """Return ``p`` if it lies in Δ, else raise: the attack must never leave the set.

        Raises:
            ThreatModelError: naming the violated bound; this is a bug in the attack, not in
            the user's input.
        """
        found = self.violations(p)
        if found:
            raise ThreatModelError(
                f"{what} left the {self.name} perturbation set: {'; '.join(found)}. The attack "
                "must project every iterate onto the set; please report this."
            )
        return p

    def random(
        self, seed: int, indices: Sequence[int] | np.ndarray | torch.Tensor, restart: int
    ) -> Particles:
        """Random starting points in Δ for images with these global indices (CPU float32).

        Restart 0 draws from the published random test set's stream (``certbench generate
        weather --seed seed``), so its image is that set's image (before uint8 rounding, with
        offsets beyond the truncation clipped); restart r ≥ 1 draws the same distribution from
        the stream ``derive_seed(seed, "weather-attack", weather, severity, index, r)``. The
        attack passes the sets' public seed for restart 0 and the run seed for r ≥ 1
        (``certbench.weather.attack``).
        """
        spec = weather_level(self.weather, self.severity)
        index = np.asarray(indices, dtype=np.int64)
        if restart == 0:
            rngs = particle_rngs(seed, self.weather, self.severity, index)
        else:
            keys = ("weather-attack", self.weather, self.severity)
            rngs = [
                np.random.default_rng(derive_seed(seed, *keys, int(i), restart))
                for i in index.tolist()
            ]
        draws = [draw_particles(rng, spec) for rng in rngs]
        if not draws:
            return Particles(
                torch.zeros(0, self.count, dtype=torch.long),
                torch.zeros(0, self.count, 2),
                torch.zeros(0),
                torch.zeros(0, self.count),
            )
        start = Particles(
            torch.from_numpy(np.stack([d.ids for d in draws])).long(),
            torch.from_numpy(np.stack([d.centres for d in draws]).astype(np.float32)),
            torch.from_numpy(np.radians([d.base for d in draws]).astype(np.float32)),
            torch.from_numpy(np.radians(np.stack([d.offsets for d in draws])).astype(np.float32)),
        )
        return self.check(self.project(start), "random start")

    def bank(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The level's sprite bank on ``device``."""
        return sprite_bank(self.weather, self.severity).to(device)

    def apply(
        self, x: torch.Tensor, p: Particles, bank: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x' = o + x(1 − o) with o rendered from ``p`` (differentiable in p's variables)."""
        sprites = self.bank(x.device) if bank is None else bank
        mask = render_mask(sprites, p.ids, p.centres, p.angles, opacity=self.opacity)
        return composite(x, mask)

    def describe(self) -> dict[str, object]:
        """Δ's bounds in user units (degrees, pixels) for cards, docs and records' metadata."""
        spec = weather_level(self.weather, self.severity)
        return {
            "weather": self.weather,
            "severity": self.severity,
            "particles": self.count,
            "opacity": self.opacity,
            "sprite_length_px": list(spec.length),
            "centre_range_px": [self.centre_low, self.centre_high],
            "fall_direction_deg": [-spec.base_angle, spec.base_angle],
            "angle_offset_deg": round(math.degrees(self.offset_limit), 6),
        }


def all_sets(
    weathers: Sequence[str] = tuple(LEVELS), severities: Sequence[int] = (1, 2, 3, 4, 5)
) -> list[WeatherSet]:
    """Δ for every requested (weather, severity), weather-major."""
    return [WeatherSet.for_level(w, s) for w in weathers for s in severities]
