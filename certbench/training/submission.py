"""What a training run hands to the leaderboard: ``model.safetensors`` and ``manifest.json``.

The manifest names the registry architecture and its kwargs, the classes, the input layer's
mean/std (computed from the training images), the smoothing σ and the recipe's paper and code;
the weights are the ``nn.Sequential(NormalizeLayer, net)`` state dict in safetensors. Both are
loaded back with :func:`certbench.nets.loading.load_model` before a run returns, exactly as
``certbench certify`` and the REST API load a submission.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from certbench.data import ImageSet, card_benchmark
from certbench.errors import CertbenchError, TrainingError
from certbench.nets import (
    NAME_LENGTH,
    Architecture,
    Manifest,
    Metadata,
    Preprocessing,
    Smoothing,
    load_manifest,
    load_model,
    save_weights,
)
from certbench.training.recipes import Recipe

__all__ = [
    "MANIFEST_FILE",
    "WEIGHTS_FILE",
    "benchmark_name",
    "build_manifest",
    "input_statistics",
    "write_submission",
]

WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"
Normalize = Literal["center", "standardize", "none"]


def benchmark_name(dataset: str, benchmark: str | None) -> str:
    """``benchmark`` if given; else, for a local folder, the benchmark its card names (the demo
    data: ``demo-digits``, so the manifest is accepted as written) or the folder's name; else the
    dataset id as typed (``cifar10``)."""
    if benchmark:
        return benchmark
    path = Path(dataset).expanduser()
    if not path.exists():
        return dataset
    return (card_benchmark(path) if path.is_dir() else None) or path.resolve().name


def input_statistics(images: ImageSet, normalize: Normalize) -> tuple[list[float], list[float]]:
    """(mean, std) of the input layer: per-channel statistics of the training images in [0, 1].

    ``center`` gives (mean, 1), ``standardize`` (mean, std), ``none`` (0, 1); rounded to 4
    decimals so the manifest reads well.
    """
    channels = images.images.shape[1]
    if normalize == "none":
        return [0.0] * channels, [1.0] * channels
    pixels = images.images.to(torch.float64).div(255.0).transpose(0, 1).reshape(channels, -1)
    mean = [round(float(v), 4) for v in pixels.mean(dim=1)]
    if normalize == "center":
        return mean, [1.0] * channels
    return mean, [round(max(float(v), 1e-4), 4) for v in pixels.std(dim=1)]


def build_manifest(
    *,
    recipe: Recipe,
    images: ImageSet,
    arch: str,
    arch_kwargs: Mapping[str, Any],
    mean: list[float],
    std: list[float],
    sigma: float,
    train_sigma: float,
    epochs: int,
    seed: int,
    benchmark: str,
) -> Manifest:
    """The submission manifest of a run (architecture, classes, preprocessing, σ, provenance)."""
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted(arch_kwargs.items()))
    arch_text = f"{arch}({kwargs})" if kwargs else arch

    def title(network: str) -> str:
        return (
            f"{recipe.title}, training σ={train_sigma:g}, {network}, {epochs} epochs "
            f"(certbench train, seed {seed})"
        )

    # a library network's kwargs may not fit the name's column: the manifest holds them anyway
    name = title(arch_text) if len(title(arch_text)) <= NAME_LENGTH else title(arch)
    return Manifest(
        benchmark=benchmark,
        architecture=Architecture(name=arch, kwargs=dict(arch_kwargs)),
        num_classes=len(images.class_names),
        preprocessing=Preprocessing(mean=tuple(mean), std=tuple(std)),
        smoothing=Smoothing(sigma=sigma),
        metadata=Metadata(
            name=name,
            paper_url=recipe.paper_url,  # type: ignore[arg-type]
            code_url=recipe.code_url,  # type: ignore[arg-type]
        ),
        input_size=tuple(images.images.shape[1:]),  # type: ignore[arg-type]
    )


def write_submission(out: Path, model: nn.Module, manifest: Manifest) -> tuple[Path, Path]:
    """Write ``model.safetensors`` + ``manifest.json`` into ``out`` and load them back.

    Raises TrainingError if the pair does not load as a submission (a bug, never user input).
    """
    weights = out / WEIGHTS_FILE
    manifest_path = out / MANIFEST_FILE
    save_weights(model.to("cpu").to(memory_format=torch.contiguous_format), weights)
    manifest_path.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    try:
        load_model(weights, load_manifest(manifest_path))
    except CertbenchError as err:
        raise TrainingError(f"the written model does not load as a submission: {err}") from err
    return weights, manifest_path
