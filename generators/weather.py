"""Random rain and snow test sets from the particle simulator of Wang et al. ("Evaluating worst case
adversarial weather perturbations robustness", NeurIPS 2022 ML Safety Workshop).

The simulator itself (sprite bank, differentiable aggregation, random particle draws) lives in
``certbench.weather.simulator``, shared with the simulation attack (``certbench.weather.attack``);
this module
turns it into uint8 test sets: 5 severity levels per weather, per-image draws from streams keyed
by (seed, weather, level, source image index).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from certbench.errors import GeneratorError
from certbench.weather import (
    LEVELS,
    WEATHERS,
    composite,
    particle_rngs,
    render_mask,
    sample_particles,
    sprite_bank,
    weather_level,
)
from generators.corruption_benchmark import CorruptionBenchmark
from generators.corruption_runs import check_images


def simulate(
    images: np.ndarray,
    kind: str,
    level: int,
    *,
    seed: int = 0,
    indices: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Random rain/snow at ``level`` on uint8 (N, 32, 32, 3) images -> uint8 (rounded).

    Raises:
        GeneratorError: unknown weather or level, bad images or indices.
    """
    spec = weather_level(kind, level)
    images = check_images(images)
    if indices is None:
        indices = np.arange(len(images))
    indices = np.asarray(indices, dtype=np.int64)
    if indices.shape != (len(images),):
        raise GeneratorError(
            f"indices must have one entry per image ({len(images)}), got shape {indices.shape}."
        )
    draws = [sample_particles(rng, spec) for rng in particle_rngs(seed, kind, level, indices)]
    ids = torch.from_numpy(np.stack([d["ids"] for d in draws]))
    centres = torch.from_numpy(np.stack([d["centres"] for d in draws]).astype(np.float32))
    angles = torch.from_numpy(np.stack([d["angles"] for d in draws]).astype(np.float32))
    with torch.no_grad():
        mask = render_mask(sprite_bank(kind, level), ids, centres, angles, opacity=spec.opacity)
        x = torch.from_numpy(images).permute(0, 3, 1, 2).to(torch.float32) / 255.0
        out = composite(x, mask)
    return (out * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


PROTOCOL = """Random rain and snow from a particle simulator after "Evaluating Worst Case
Adversarial Weather Perturbations Robustness" (sprite bank + differentiable aggregation).
Sprite bank (15x15, fixed seed):
rain streaks of varied length, tilt (N(0, 3°)) and width (0.6–1.4 px, Gaussian cross-section);
snowflakes from smoothed Gaussian noise under a round window, thresholded and motion-blurred.
Each image gets N particles, each a bank sprite rotated (image fall direction ± per-particle
jitter) and translated (uniform over the image plus a 3 px margin), resampled with bilinear
`grid_sample` and splatted; mask o = 1 − Π(1 − a·s_i) ≤ 1; image x' = o + x(1 − o), rounded
to uint8. The same renderer is differentiable in particle positions and rotations
(`certbench.weather.render_mask`) for attacks.

| weather | level | particles | opacity a | length (px) |
|---|---|---|---|---|
""" + "\n".join(
    f"| {kind} | {i} | {lv.count} | {lv.opacity} | {lv.length[0]}–{lv.length[1]} |"
    for kind, levels in LEVELS.items()
    for i, lv in enumerate(levels, start=1)
)

CITATION = """@misc{weather_simulator_eval,
  title={Evaluating Worst Case Adversarial Weather Perturbations Robustness},
  note={Anonymous authors, under review; particle simulator with sprite bank and
        differentiable aggregation}
}"""


def benchmark_spec() -> CorruptionBenchmark:
    """The weather benchmark for ``generators.corruption_sets``."""

    def apply(
        images: np.ndarray, name: str, level: int, seed: int, indices: np.ndarray
    ) -> np.ndarray:
        return simulate(images, name, level, seed=seed, indices=indices)

    return CorruptionBenchmark(
        key="weather",
        suffix="-weather",
        names=WEATHERS,
        apply=apply,
        severity_value=lambda name, level: float(level),
        protocol=PROTOCOL,
        citation=CITATION,
        tags=("weather", "rain", "snow"),
    )
