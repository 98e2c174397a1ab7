"""``certbench train`` (entry point ``train``): train a reference model with a paper's recipe.

Only typer at import time; torch and the training code are imported inside the command, so
registering it costs nothing for ``certbench --help``.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from certbench.cli.app import dataset_name, user_errors
from certbench.cli.checks import (
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    SEED_MAX,
    check_training_sigma,
    output_folder,
)
from certbench.cli.denoiser_training import (
    CLASSIFIER_HELP,
    DENOISER_HELP,
    DENOISER_RECIPE_NAMES,
    run_denoiser_recipe,
)

RECIPE_NAMES = (
    "gaussian",
    "gaussian-jsd",
    "augmix-jsd",
    "augmix-hcr",
    "fouriermix-jsd",
    "fouriermix-hcr",
)
"""``certbench.training.recipes.RECIPES``' names, repeated to keep this module light (a test
keeps them equal)."""

RecipeName = StrEnum(  # type: ignore[misc]
    "RecipeName", [(name, name) for name in RECIPE_NAMES + DENOISER_RECIPE_NAMES]
)


class Normalization(StrEnum):
    CENTER = "center"  # upper-case names: a member named ``center`` would hide ``str.center``
    STANDARDIZE = "standardize"
    NONE = "none"


def parse_arch_kwarg(item: str) -> tuple[str, Any]:
    """``NAME=VALUE`` of ``--arch-kwarg`` as the manifest will hold it: VALUE read as JSON
    (``10``, ``0.1``, ``true``, ``[1, 1]``), a comma-separated list of numbers (``1,1,1,1``) or
    else a word (``avg``). Raises TrainingError for an item without ``=``."""
    from certbench.errors import TrainingError

    name, sep, value = item.partition("=")
    if not sep or not name:
        raise TrainingError(f"--arch-kwarg {item!r}: write NAME=VALUE, e.g. depth=10")
    text = f"[{value}]" if "," in value and not value.lstrip().startswith("[") else value
    try:
        return name, json.loads(text)
    except ValueError:
        return name, value


@user_errors
def train_command(
    recipe: Annotated[
        RecipeName,  # type: ignore[valid-type]
        typer.Option(
            help="gaussian (Cohen et al. 2019), gaussian-jsd (Jeong & Shin 2020), "
            "augmix-jsd, augmix-hcr, fouriermix-jsd, fouriermix-hcr (Sun et al. 2022); "
            "denoisers: ddpm (Ho et al. 2020), denoiser-mse (Salman et al. 2020)."
        ),
    ],
    dataset: Annotated[
        str,
        typer.Option(
            help="cifar10, cifar100, a Hub id, a Hub-layout or torchvision folder.",
            callback=dataset_name,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Output folder (weights, manifest, log, checkpoint); not inside a Python package.",
            callback=output_folder,
        ),
    ],
    arch: Annotated[
        str,
        typer.Option(
            help="Registry architecture (lenet5, cifar_resnet20, wrn, ...) or a library one: "
            "timm/<model>, torchvision/<model>."
        ),
    ] = "cifar_resnet110",
    arch_kwarg: Annotated[
        list[str] | None,
        typer.Option(
            help="Architecture kwarg NAME=VALUE (repeatable): a number, true/false, a word or a "
            "list, e.g. depth=10, global_pool=avg, layers=1,1,1,1."
        ),
    ] = None,
    sigma: Annotated[
        float,
        typer.Option(help="Noise level σ (training and manifest).", callback=check_training_sigma),
    ] = 0.25,
    train_sigma: Annotated[
        float | None,
        typer.Option(help="Training noise if not σ (0: no noise).", callback=NON_NEGATIVE),
    ] = None,
    epochs: Annotated[int, typer.Option(help="Epochs (paper: 200).", min=1)] = 200,
    batch_size: Annotated[
        int | None, typer.Option(help="Images per SGD step (recipe default: 256, 128).", min=1)
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option(
            help="Initial learning rate (default 0.1, ×0.1 at 50 % and 75 %; "
            "denoisers: the recipe's).",
            callback=POSITIVE,
        ),
    ] = None,
    momentum: Annotated[float, typer.Option(help="SGD momentum.", callback=FRACTION)] = 0.9,
    weight_decay: Annotated[
        float | None,
        typer.Option(
            help="Weight decay (default 1e-4; denoisers: the recipe's).", callback=NON_NEGATIVE
        ),
    ] = None,
    lbd: Annotated[
        float | None,
        typer.Option(help="Consistency weight λ (recipe/paper default).", callback=NON_NEGATIVE),
    ] = None,
    eta: Annotated[
        float | None,
        typer.Option(help="HCR η / entropy weight (default).", callback=NON_NEGATIVE),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, max=SEED_MAX)] = 0,
    normalize: Annotated[
        Normalization, typer.Option(help="Input layer: center (paper), standardize, none.")
    ] = Normalization.CENTER,
    config: Annotated[str | None, typer.Option(help="Dataset config.")] = None,
    revision: Annotated[str | None, typer.Option(help="Hub revision of the dataset.")] = None,
    limit: Annotated[
        int | None, typer.Option(help="Train on the first N images only.", min=1)
    ] = None,
    augmix_variant: Annotated[
        str, typer.Option(help="hendrycks (AugMix paper) or reference (Sun et al.'s release).")
    ] = "hendrycks",
    benchmark: Annotated[
        str | None,
        typer.Option(
            help="Manifest benchmark name, as the server calls it (default: the one the data "
            "folder's card names, e.g. demo-digits for `certbench datasets demo`; else the "
            "folder's name or the dataset id)."
        ),
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="cpu, cuda, cuda:1 (default: cuda if any).")
    ] = None,
    amp: Annotated[str, typer.Option(help="bf16, none or auto (bf16 on CUDA).")] = "auto",
    channels_last: Annotated[
        bool | None, typer.Option(help="channels_last memory format (default: on CUDA).")
    ] = None,
    compile: Annotated[bool, typer.Option(help="torch.compile the model.")] = False,
    workers: Annotated[
        int | None,
        typer.Option(help="DataLoader workers (default: 0 on CPU, up to 8 on CUDA).", min=0),
    ] = None,
    augment_device: Annotated[
        str | None, typer.Option(help="cpu or cuda: where FourierMix runs (default: device).")
    ] = None,
    eval_split: Annotated[
        str, typer.Option(help="Split evaluated after each epoch; 'none' to skip.")
    ] = "test",
    eval_limit: Annotated[
        int | None, typer.Option(help="Evaluate the first N images.", min=1)
    ] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every N epochs.", min=1)] = 1,
    resume: Annotated[bool, typer.Option(help="Continue from OUT/checkpoint.")] = False,
    deterministic: Annotated[
        bool, typer.Option(help="Deterministic kernels (slower on CUDA).")
    ] = False,
    threads: Annotated[
        int | None,
        typer.Option(help="CPU threads for torch (1 is fastest on a busy small machine).", min=1),
    ] = None,
    denoiser: Annotated[str | None, typer.Option(help=DENOISER_HELP)] = None,
    classifier: Annotated[Path | None, typer.Option(help=CLASSIFIER_HELP)] = None,
) -> None:
    """Train a base classifier for randomized smoothing (paper schedule by default).

    Writes OUT/model.safetensors + OUT/manifest.json (for certify and the REST API),
    OUT/train_log.jsonl and OUT/checkpoint/ (for --resume).
    """
    from certbench.errors import TrainingError
    from certbench.training import RunOptions, TrainConfig, train

    kwargs = dict(parse_arch_kwarg(item) for item in arch_kwarg or [])
    if amp not in ("bf16", "none", "auto"):
        raise TrainingError(f"--amp {amp!r}: use bf16, none or auto (fp16 needs loss scaling)")
    if augment_device not in (None, "cpu", "cuda"):
        raise TrainingError(f"--augment-device {augment_device!r}: use cpu or cuda")
    cfg = TrainConfig(
        recipe=recipe.value,
        dataset=dataset,
        arch=arch,
        arch_kwargs=kwargs,
        sigma=sigma,
        train_sigma=train_sigma,
        epochs=epochs,
        batch_size=batch_size,
        lr=0.1 if lr is None else lr,
        momentum=momentum,
        weight_decay=1e-4 if weight_decay is None else weight_decay,
        lbd=lbd,
        eta=eta,
        seed=seed,
        normalize=normalize.value,  # type: ignore[arg-type]
        config=config,
        revision=revision,
        limit=limit,
        benchmark=benchmark,
        augmix_variant=augmix_variant,  # type: ignore[arg-type]
    )
    options = RunOptions(
        device=device,
        amp=None if amp == "none" else amp,  # type: ignore[arg-type]
        channels_last=channels_last,
        compile=compile,
        workers=workers,
        augment_device=augment_device,  # type: ignore[arg-type]
        eval_split=None if eval_split == "none" else eval_split,
        eval_limit=eval_limit,
        checkpoint_every=checkpoint_every,
        resume=resume,
        deterministic=deterministic,
        threads=threads,
    )
    if recipe.value in DENOISER_RECIPE_NAMES:
        settings = {"recipe": recipe.value, "dataset": dataset, "denoiser": denoiser,
                    "sigma": sigma, "epochs": epochs, "batch_size": batch_size, "lr": lr,
                    "weight_decay": weight_decay, "seed": seed, "config": config,
                    "revision": revision, "limit": limit, "benchmark": benchmark}  # fmt: skip
        refused = {"--arch-kwarg": bool(arch_kwarg), "--train-sigma": train_sigma is not None,
                   "--lbd": lbd is not None, "--eta": eta is not None}  # fmt: skip
        return run_denoiser_recipe(out, settings=settings, options=vars(options), refused=refused,
                                   classifier=classifier)  # fmt: skip
    if classifier is not None:
        raise TrainingError(f"--classifier applies to --recipe ddpm or denoiser-mse, not {recipe}")
    if denoiser is not None:
        raise TrainingError(f"--denoiser applies to --recipe ddpm or denoiser-mse, not {recipe}")
    result = train(cfg, out, options)
    last = result.last
    summary = ", ".join(
        f"{key} {last[key]:.4f}"
        for key in ("train_loss", "eval_clean_accuracy", "eval_noisy_accuracy")
        if isinstance(last.get(key), float)
    )
    typer.echo(
        f"epochs done: {result.epochs_done}/{cfg.epochs}" + (f"; {summary}" if summary else "")
    )
    typer.echo(f"wrote {result.weights}, {result.manifest}, {result.log}")
    written = json.loads(result.manifest.read_text(encoding="utf-8"))["benchmark"]
    typer.echo(
        f"manifest benchmark: {written!r} (submit it to that benchmark; --benchmark NAME or the "
        'manifest\'s "benchmark" field changes it)'
    )


def register(app: typer.Typer) -> None:
    """Entry point ``certbench.commands:train``."""
    app.command("train")(train_command)
