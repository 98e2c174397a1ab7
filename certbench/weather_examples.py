"""Example panels in the style of seed 002's Fig. 1: clean, random weather, simulation attack,
and the difference between the attacked and the random image, for a few images.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn

from certbench.errors import ThreatModelError
from certbench.weather_attack import AttackConfig, attacked_images
from certbench.weather_threat import WeatherSet

COLUMNS = ("clean", "random", "attacked", "|attacked - random|")  # ASCII: the default font


@dataclass(frozen=True)
class WeatherExample:
    """One image's panel row; pictures are (H, W, 3) float32 in [0, 1], ``difference`` signed
    (attacked − random, in [−1, 1]). Predictions are the base classifier's."""

    index: int
    label: int
    weather: str
    severity: int
    clean: np.ndarray
    random: np.ndarray
    attacked: np.ndarray
    difference: np.ndarray
    random_prediction: int
    attacked_prediction: int


def weather_examples(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    weather: str,
    severity: int,
    config: AttackConfig | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    device: torch.device | str | None = None,
) -> list[WeatherExample]:
    """Attack a few images exactly as :func:`certbench.weather_attack.attack_base` does (same
    seed, same indices: the same attacked images) and return their panel rows."""
    wset = WeatherSet.for_level(weather, severity, (config or AttackConfig()).truncation)
    clean, random, attacked, found = attacked_images(
        model, images, labels, wset, config=config, indices=indices, device=device
    )
    idx = torch.arange(len(clean)) if indices is None else torch.as_tensor(indices)
    y = torch.as_tensor(labels).tolist()

    def hwc(t: torch.Tensor) -> np.ndarray:
        return t.permute(1, 2, 0).numpy().astype(np.float32)

    return [
        WeatherExample(
            index=int(idx[j]),
            label=int(y[j]),
            weather=weather,
            severity=severity,
            clean=hwc(clean[j]),
            random=hwc(random[j]),
            attacked=hwc(attacked[j]),
            difference=hwc(attacked[j] - random[j]),
            random_prediction=int(found.random_prediction[j]),
            attacked_prediction=int(found.attacked_prediction[j]),
        )
        for j in range(len(clean))
    ]


def write_examples_png(
    examples: Sequence[WeatherExample], path: str | Path, *, scale: int = 4
) -> Path:
    """A grid PNG: one row per image, columns clean / random / attacked / |difference|.

    The difference column shows |attacked − random| divided by its maximum over the panel
    (black: identical), since the raw difference of two weather images is mostly faint.
    Column titles on top; each row is labelled with the image index, label and predictions.

    Raises:
        ThreatModelError: no examples or a scale below 1.
    """
    if not examples or scale < 1:
        raise ThreatModelError(
            f"need at least one example and scale ≥ 1 (got {len(examples)}, scale={scale})."
        )
    peak = max(float(np.abs(e.difference).max()) for e in examples) or 1.0
    size = examples[0].clean.shape[0] * scale
    gap, top = 4, 16
    width = len(COLUMNS) * (size + gap) + 150
    height = top + len(examples) * (size + gap)
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    for c, title in enumerate(COLUMNS):
        draw.text((c * (size + gap), 2), title, fill="black")
    for r, e in enumerate(examples):
        pictures = (e.clean, e.random, e.attacked, np.abs(e.difference) / peak)
        for c, picture in enumerate(pictures):
            pixels = (np.clip(picture, 0, 1) * 255).round().astype(np.uint8)
            tile = Image.fromarray(pixels).resize((size, size), Image.Resampling.NEAREST)
            canvas.paste(tile, (c * (size + gap), top + r * (size + gap)))
        note = f"#{e.index} y={e.label}\nrandom: {e.random_prediction}"
        note += f"\nattack: {e.attacked_prediction}"
        draw.text((len(COLUMNS) * (size + gap), top + r * (size + gap)), note, fill="black")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(target, format="PNG")
    return target
