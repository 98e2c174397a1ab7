"""``certbench train --recipe ddpm | denoiser-mse``: train a denoiser for denoised smoothing.

The recipes (:mod:`certbench.training.denoiser_recipes`) train a denoiser, not a classifier:
``ddpm`` a noise-prediction U-Net (Ho et al., NeurIPS 2020), ``denoiser-mse`` Salman et al.'s
DnCNN (NeurIPS 2020). ``--denoiser`` names the network: a preset, a JSON object or a JSON file
holding one (:data:`certbench.denoising.DenoiserConfig`). Only typer and the standard library
at import time, like every command module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

__all__ = [
    "CLASSIFIER_HELP",
    "DENOISER_HELP",
    "DENOISER_RECIPE_NAMES",
    "denoiser_block",
    "run_denoiser_recipe",
]

DENOISER_RECIPE_NAMES = ("ddpm", "denoiser-mse")
"""``certbench.training.denoiser_recipes.DENOISER_RECIPES``' names (a test keeps them equal)."""

DENOISER_HELP = (
    "Denoiser of --recipe ddpm / denoiser-mse: a preset (ddpm-cifar10-32, dncnn, dncnn-wide, "
    "unet-demo, unet-tiny, dncnn-demo), a JSON object or a JSON file (default: the recipe's, "
    "DDPM's CIFAR-10 U-Net or Salman et al.'s DnCNN)."
)


CLASSIFIER_HELP = (
    "With --recipe ddpm / denoiser-mse: the --out folder of a classifier trained by certbench "
    "train; the denoiser is put in front of it and --out gets model.safetensors + manifest.json "
    "of the composition (a denoised submission for certify and submit)."
)


def denoiser_block(text: str | None) -> dict[str, Any] | str:
    """``--denoiser`` as the training configuration takes it: a JSON object (given inline or in
    a file) or a preset's name ('' for the recipe's default)."""
    from certbench.errors import TrainingError

    if not text:
        return ""
    stripped = text.strip()
    if not stripped.startswith("{") and Path(stripped).is_file():
        stripped = Path(stripped).read_text(encoding="utf-8")
    if not stripped.startswith("{"):
        return stripped
    try:
        block = json.loads(stripped)
    except ValueError as err:
        raise TrainingError(f"--denoiser is not valid JSON: {err}") from err
    if not isinstance(block, dict):
        raise TrainingError("--denoiser must be a JSON object, a JSON file or a preset name")
    return block


def run_denoiser_recipe(
    out: Path,
    *,
    settings: Mapping[str, Any],
    options: Mapping[str, Any],
    refused: Mapping[str, bool],
    classifier: Path | None = None,
) -> None:
    """Train into ``out`` the denoiser ``settings`` describe (DenoiserTrainConfig's fields,
    ``denoiser`` as given on the command line) with the run ``options`` (RunOptions' fields);
    ``refused`` names the classifier options that were given, which a denoiser recipe does not
    take. With ``classifier`` (a classifier's ``certbench train`` folder, checked before
    training), ``out`` also gets the denoised submission of the two."""
    from certbench.errors import TrainingError
    from certbench.training import (
        DenoiserTrainConfig,
        RunOptions,
        check_classifier_folder,
        compose_submission,
        train_denoiser,
    )

    given = [name for name, present in refused.items() if present]
    if given:
        raise TrainingError(
            f"{', '.join(given)} apply to the classifier recipes; --recipe "
            f"{settings['recipe']} trains a denoiser (drop them)"
        )
    if classifier is not None:
        check_classifier_folder(classifier)
    config = DenoiserTrainConfig(
        **{**settings, "denoiser": denoiser_block(settings.get("denoiser"))}
    )
    result = train_denoiser(config, out, RunOptions(**options))
    last = result.last
    summary = ", ".join(
        f"{key} {last[key]:.4f}"
        for key in ("train_loss", "eval_denoised_mse", "eval_noisy_mse")
        if isinstance(last.get(key), float)
    )
    done = f"epochs done: {result.epochs_done}/{config.epochs}"
    typer.echo(done + (f"; {summary}" if summary else ""))
    typer.echo(f"wrote {result.weights}, {result.card}, {result.log}")
    if classifier is not None:
        weights, manifest = compose_submission(classifier, out)
        typer.echo(f"denoised submission (denoiser · classifier): {weights}, {manifest}")
