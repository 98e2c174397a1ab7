"""``train_denoiser``: one denoiser recipe, one dataset → a denoiser for denoised smoothing.

Output folder (``out``):

- ``denoiser.safetensors``: the denoiser's tensors, keyed ``denoiser.*`` as in a denoised
  submission's weights (:class:`certbench.denoising.DenoisedClassifier`'s state dict:
  ``denoiser.unet.*`` for a U-Net, ``denoiser.dncnn.*`` for a DnCNN);
- ``denoiser.json``: the ``denoiser`` block (:data:`certbench.denoising.DenoiserConfig`, written
  out in full), the σ it is for, the image size, the benchmark and the recipe's paper and code;
  loaded back with :func:`certbench.denoising.load_denoiser` before the run returns;
- ``train_log.jsonl`` (``start``, one ``epoch`` record each: lr, loss, evaluation, seconds,
  images/s; ``end``) and ``checkpoint/`` (safetensors + JSON, resumable at an epoch boundary),
  as :mod:`certbench.training.trainer` writes them for classifiers.

:func:`certbench.training.denoiser_submission.compose_submission` then puts the denoiser in
front of a classifier trained by ``certbench train`` (``--classifier FOLDER``).

Reproducibility as for classifiers: initialisation from ``derive_seed(seed, "init")``, the
epoch's order, crops and flips from (seed, epoch, image), the noise of step s of epoch e from
``derive_seed(seed, "noise", e, s)``, the U-Net's dropout from ``derive_seed(seed, "torch", e)``.
The per-epoch evaluation is the mean squared error of the denoised images (at σ, for a DDPM
through Carlini et al.'s one-shot denoising) against the clean ones, next to that of the noisy
images (σ² in expectation).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from certbench import __version__
from certbench.augment import RandomStream
from certbench.data import ImageSet, Subset, load_images
from certbench.denoising import DiffusionDenoiser, build_denoiser, load_denoiser
from certbench.errors import CertbenchError, DataSourceError, TrainingError
from certbench.nets import save_weights
from certbench.smoothing import derive_seed
from certbench.training.checkpoint import load_checkpoint, read_state, save_checkpoint
from certbench.training.config import RunOptions
from certbench.training.data import EpochBatches, TrainBatches
from certbench.training.denoiser_recipes import (
    DenoiserRecipe,
    DenoiserTrainConfig,
    get_denoiser_recipe,
)
from certbench.training.evaluation import autocast
from certbench.training.recipes import get_recipe
from certbench.training.submission import benchmark_name
from certbench.training.trainer import LOG_FILE, _amp_dtype, _configure_torch, _device

__all__ = ["DENOISER_CARD", "DENOISER_WEIGHTS", "DenoiserTrainResult", "train_denoiser"]

DENOISER_WEIGHTS = "denoiser.safetensors"
DENOISER_CARD = "denoiser.json"


@dataclass(frozen=True)
class DenoiserTrainResult:
    """Paths written and the last epoch's log record."""

    out: Path
    weights: Path
    card: Path
    log: Path
    epochs_done: int
    last: dict[str, Any]


@dataclass
class _Run:
    cfg: DenoiserTrainConfig
    recipe: DenoiserRecipe
    options: RunOptions
    out: Path
    device: torch.device
    amp: torch.dtype | None
    denoiser: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    eval_set: ImageSet | None
    lr: float = 0.0
    """The learning rate of the last step taken (the log's ``lr`` of its epoch)."""


def train_denoiser(
    config: DenoiserTrainConfig,
    out: Path | str,
    options: RunOptions | None = None,
    *,
    until_epoch: int | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> DenoiserTrainResult:
    """Train ``config`` into ``out``; with ``until_epoch`` stop (checkpointed) after that epoch.

    Raises TrainingError, DataSourceError or DenoiserConfigError (all CertbenchError).
    """
    cfg = config.resolved()
    options = options or RunOptions()
    _check_options(options)
    recipe = get_denoiser_recipe(cfg.recipe)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg_json = asdict(cfg)
    _check_resume(out, cfg_json, options.resume)
    device = _device(options)
    _configure_torch(options, device)
    train_set = _load(cfg, "train", cfg.limit)
    size = tuple(train_set.images.shape[1:])
    torch.manual_seed(derive_seed(cfg.seed, "init"))
    denoiser = build_denoiser(cfg.denoiser_config(), sigma=cfg.sigma, input_size=size).to(device)
    optimizer = torch.optim.Adam(
        denoiser.parameters(), lr=float(cfg.lr or 0), weight_decay=float(cfg.weight_decay or 0)
    )
    steps = len(train_set) // int(cfg.batch_size or 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _rate(recipe, cfg, steps))
    start = 0
    if options.resume and read_state(out) is not None:
        start = load_checkpoint(out, model=denoiser, optimizer=optimizer, scheduler=scheduler).epoch
    end = cfg.epochs if until_epoch is None else min(cfg.epochs, until_epoch)
    eval_set = _eval_set(cfg, options)
    amp = _amp_dtype(options, device)
    run = _Run(cfg, recipe, options, out, device, amp, denoiser, optimizer, scheduler, eval_set)
    _log(out, {"event": "start", "config": cfg_json, "start_epoch": start, "device": str(device),
               "certbench_version": __version__, "torch_version": torch.__version__,
               "time": time.time()})  # fmt: skip
    last = _epochs(run, train_set, start, end, on_epoch)
    weights, card = _write(run, train_set)
    done = read_state(out)
    epochs_done = int(done["epoch"]) if done else start
    _log(out, {"event": "end", "epochs_done": epochs_done, "time": time.time()})
    return DenoiserTrainResult(out, weights, card, out / LOG_FILE, epochs_done, last)


def _check_options(options: RunOptions) -> None:
    if options.augment_device not in (None, "cpu"):
        raise TrainingError("--augment-device applies to the FourierMix recipes only; drop it")
    if options.compile or options.channels_last:
        raise TrainingError(
            "--compile and --channels-last apply to the classifier recipes; drop them"
        )


def _load(cfg: DenoiserTrainConfig, split: str, limit: int | None) -> ImageSet:
    return load_images(
        cfg.dataset, config=cfg.config, split=split, revision=cfg.revision,
        subset=Subset(limit=limit) if limit else None,
    )  # fmt: skip


def _eval_set(cfg: DenoiserTrainConfig, options: RunOptions) -> ImageSet | None:
    """The per-epoch evaluation split, or None; a missing split says how to skip it."""
    if not options.eval_split:
        return None
    try:
        return _load(cfg, options.eval_split, options.eval_limit)
    except DataSourceError as err:
        raise TrainingError(
            f"cannot load the evaluation split {options.eval_split!r} ({err}); pass "
            "--eval-split none to train without per-epoch evaluation"
        ) from err


def _check_resume(out: Path, cfg_json: dict[str, Any], resume: bool) -> None:
    state = read_state(out)
    if state is None:
        return
    if not resume:
        raise TrainingError(
            f"{str(out)!r} already holds a training checkpoint (epoch {state['epoch']}); pass "
            "--resume to continue it or choose another --out folder"
        )
    if state["config"] != cfg_json:
        diff = sorted(k for k in cfg_json if state["config"].get(k) != cfg_json[k])
        raise TrainingError(
            f"cannot resume {str(out)!r}: the checkpoint was made with different settings "
            f"({', '.join(diff)}); use the same options or another --out folder"
        )


def _rate(
    recipe: DenoiserRecipe, cfg: DenoiserTrainConfig, steps_per_epoch: int
) -> Callable[[int], float]:
    """The learning-rate factor of optimizer step s (0-based): Ho et al.'s linear warm-up
    ``min(s / warmup, 1)`` (over at most a tenth of the run), times 0.1 for every milestone
    epoch passed (Salman et al.'s StepLR at a third and two thirds of the run)."""
    total = steps_per_epoch * cfg.epochs
    warmup = min(int(cfg.warmup_steps or 0), total // 10)
    milestones = sorted({max(1, round(f * cfg.epochs)) for f in recipe.milestones})

    def factor(step: int) -> float:
        epoch = step // max(1, steps_per_epoch)
        warm = min(step / warmup, 1.0) if warmup else 1.0
        return warm * 0.1 ** sum(epoch >= m for m in milestones)

    return factor


def _log(out: Path, record: dict[str, Any]) -> None:
    with (out / LOG_FILE).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def _epochs(
    run: _Run,
    train_set: ImageSet,
    start: int,
    end: int,
    on_epoch: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """Train epochs start..end-1: steps, per-epoch log and evaluation, checkpoints."""
    cfg = run.cfg
    batches = TrainBatches(
        train_set.images, train_set.labels, train_set.indices, get_recipe("gaussian"),
        seed=cfg.seed,
    )  # fmt: skip
    sampler = EpochBatches(
        len(train_set), int(cfg.batch_size or 1), seed=cfg.seed, start=start, end=end
    )
    loader = DataLoader(batches, batch_size=None, sampler=sampler, num_workers=0)
    steps = sampler.steps_per_epoch()
    last: dict[str, Any] = {}
    zero = torch.zeros((), device=run.device)
    loss_sum, images, step, started = zero, 0, 0, time.perf_counter()
    with tqdm(total=len(loader), disable=not run.options.progress, unit="step",
              desc=cfg.recipe, dynamic_ncols=True) as bar:  # fmt: skip
        for batch in loader:
            epoch = int(batch["epoch"])
            if step == 0:
                torch.manual_seed(derive_seed(cfg.seed, "torch", epoch))
                run.denoiser.train()
                loss_sum, images, started = zero, 0, time.perf_counter()
            stream = RandomStream(derive_seed(cfg.seed, "noise", epoch, step), run.device)
            loss = _step(run, batch["views"][:, 0].to(run.device), stream)
            loss_sum = loss_sum + loss.detach().float()  # on the device: one sync per refresh
            images, step = images + len(batch["labels"]), step + 1
            bar.update(1)
            if step % 10 == 0 or step == steps:
                bar.set_postfix_str(
                    f"epoch {epoch + 1}/{cfg.epochs} loss {float(loss_sum) / step:.4f}"
                )
            if step == steps:
                seconds = time.perf_counter() - started
                last = _end_of_epoch(run, epoch, float(loss_sum) / steps, images, seconds, end)
                step = 0
                if on_epoch is not None:
                    on_epoch(last)
    return last


def _step(run: _Run, clean: torch.Tensor, stream: RandomStream) -> torch.Tensor:
    """One Adam step of the recipe's loss on a batch of clean images in [0, 1]."""
    with autocast(run.device, run.amp):
        loss = run.recipe.loss(run.denoiser, clean, stream, run.cfg.sigma)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if run.recipe.grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(run.denoiser.parameters(), run.recipe.grad_clip)
    run.optimizer.step()
    run.lr = float(run.optimizer.param_groups[0]["lr"])
    run.scheduler.step()
    return loss


def _end_of_epoch(
    run: _Run, epoch: int, loss: float, images: int, seconds: float, end: int
) -> dict[str, Any]:
    """Log (and evaluate) the epoch, checkpoint when due; refuses a diverged run."""
    if not math.isfinite(loss):
        raise TrainingError(
            f"training diverged in epoch {epoch + 1} (loss {loss}); lower --lr or check the data"
        )
    record: dict[str, Any] = {
        "event": "epoch", "epoch": epoch + 1, "lr": run.lr,
        "train_loss": loss, "seconds": seconds,
        "images_per_second": images / seconds if seconds > 0 else None,
    }  # fmt: skip
    if run.eval_set is not None:
        record.update(
            evaluate_denoiser(
                run.denoiser, run.eval_set, sigma=run.cfg.sigma, seed=run.cfg.seed,
                device=run.device, amp=run.amp,
            )
        )  # fmt: skip
    _log(run.out, record)
    if (epoch + 1) % run.options.checkpoint_every == 0 or epoch + 1 == end:
        save_checkpoint(
            run.out, epoch=epoch + 1, model=run.denoiser, optimizer=run.optimizer,
            scheduler=run.scheduler, config=asdict(run.cfg),
        )  # fmt: skip
    return record


@torch.no_grad()
def evaluate_denoiser(
    denoiser: nn.Module,
    images: ImageSet,
    *,
    sigma: float,
    seed: int,
    device: torch.device,
    amp: torch.dtype | None = None,
    batch_size: int = 100,
) -> dict[str, float]:
    """Mean squared error per pixel of the denoised and of the noisy images against the clean
    ones, one draw of N(0, σ²) noise per image seeded by (seed, batch start); eval mode."""
    denoiser.eval()
    denoised_sum = noisy_sum = 0.0
    for start in range(0, len(images), batch_size):
        x = images.images[start : start + batch_size].to(device).float().div_(255.0)
        noise = RandomStream(derive_seed(seed, "eval", start), device).normal(x.shape).to(device)
        noisy = x + sigma * noise
        with autocast(device, amp):
            denoised = denoiser(noisy).float()
        denoised_sum += float((denoised - x).pow(2).sum())
        noisy_sum += float((noisy - x).pow(2).sum())
    pixels = images.images[0].numel() * len(images)
    return {"eval_denoised_mse": denoised_sum / pixels, "eval_noisy_mse": noisy_sum / pixels}


def _write(run: _Run, train_set: ImageSet) -> tuple[Path, Path]:
    """``denoiser.safetensors`` and ``denoiser.json``, loaded back as a submission would be."""
    cfg, recipe = run.cfg, run.recipe
    weights, card = run.out / DENOISER_WEIGHTS, run.out / DENOISER_CARD
    module = run.denoiser.to("cpu")
    save_weights(nn.ModuleDict({"denoiser": module}), weights)
    size = list(train_set.images.shape[1:])
    record: dict[str, Any] = {
        "denoiser": cfg.denoiser,
        "smoothing": {"sigma": cfg.sigma},
        "input_size": size,
        "benchmark": benchmark_name(cfg.dataset, cfg.benchmark),
        "recipe": recipe.name,
        "metadata": {
            "name": f"{recipe.title}, {cfg.epochs} epochs (certbench train, seed {cfg.seed})",
            "paper_url": recipe.paper_url,
            "code_url": recipe.code_url,
        },
    }
    if isinstance(module, DiffusionDenoiser):
        record["timestep"] = module.timestep
    card.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    try:
        tensors = {k.removeprefix("denoiser."): v for k, v in load_file(str(weights)).items()}
        load_denoiser(tensors, cfg.denoiser_config(), sigma=cfg.sigma, input_size=size)
    except CertbenchError as err:
        raise TrainingError(f"the written denoiser does not load back: {err}") from err
    return weights, card
