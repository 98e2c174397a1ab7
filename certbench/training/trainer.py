"""``train``: one recipe, one dataset, one architecture → a submission-ready model folder.

Output folder (``out``):

- ``model.safetensors`` and ``manifest.json``: what ``certbench certify`` and the REST API take
  (checked with :func:`certbench.nets.loading.load_model` before the run returns);
- ``train_log.jsonl``: one JSON object per line — a ``start`` record with the configuration,
  one ``epoch`` record per epoch (lr, loss, accuracy, evaluation, seconds, images/s), ``end``;
- ``checkpoint/``: model, optimizer and scheduler after the last completed epoch (safetensors +
  JSON, see :mod:`certbench.training.checkpoint`), from which ``resume=True`` continues.

Reproducibility: weights are initialised from ``derive_seed(seed, "init")``; the epoch's order,
crops, flips and views derive from (seed, epoch, image index); the Gaussian noise of step ``t``
of epoch ``e`` from ``derive_seed(seed, "noise", e, t)`` on the training device. On the CPU a
run resumed from a checkpoint ends with the same weights as an uninterrupted one (a test checks
it). On CUDA, cuDNN's autotuned kernels are not bit-reproducible; ``deterministic=True`` trades
speed for that.

The base classifier is ``nn.Sequential(NormalizeLayer(mean, std), net)`` of the registry.
``normalize="center"`` (default) subtracts the training set's per-channel mean and divides by 1:
Sun et al., ECCV 2022 (Appendix D) "exclude[s] the input normalization layer", and their release
keeps only an input-centring layer (``get_input_center_layer``). ``"standardize"`` also divides by
the per-channel std (Cohen et al.'s NormalizeLayer); ``"none"`` uses mean 0, std 1.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from certbench import __version__
from certbench.augment import AugMixConfig, RandomStream
from certbench.data import ImageSet, Subset, load_images
from certbench.errors import DataSourceError, TrainingError
from certbench.nets import build_classifier
from certbench.smoothing import derive_seed
from certbench.training.checkpoint import load_checkpoint, read_state, save_checkpoint
from certbench.training.config import RunOptions, TrainConfig
from certbench.training.data import EpochBatches, TrainBatches, make_views
from certbench.training.evaluation import autocast, evaluate
from certbench.training.recipes import Recipe, StepResult, get_recipe, recipe_loss
from certbench.training.schedule import build_optimizer
from certbench.training.submission import (
    benchmark_name,
    build_manifest,
    input_statistics,
    write_submission,
)

__all__ = ["LOG_FILE", "RunOptions", "TrainConfig", "TrainResult", "train"]


LOG_FILE = "train_log.jsonl"


@dataclass(frozen=True)
class TrainResult:
    """Paths written and the last epoch's log record."""

    out: Path
    weights: Path
    manifest: Path
    log: Path
    epochs_done: int
    last: dict[str, Any]


# ----------------------------------------------------------------------------- set-up


def _device(options: RunOptions) -> torch.device:
    name = options.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise TrainingError(f"--device {name!r} is not a device name (cpu, cuda, cuda:1)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainingError(f"--device {name!r} asked for CUDA but no GPU is available; use cpu")
    return device


def _amp_dtype(options: RunOptions, device: torch.device) -> torch.dtype | None:
    amp = options.amp
    if amp == "auto":
        amp = "bf16" if device.type == "cuda" else None
    if amp is None:
        return None
    if amp != "bf16":
        raise TrainingError(
            f"--amp must be bf16, none or auto, got {amp!r} (fp16 would need loss scaling; "
            "bf16 has float32's range)"
        )
    return torch.bfloat16


def _load_split(cfg: TrainConfig, split: str, limit: int | None) -> ImageSet:
    return load_images(
        cfg.dataset,
        config=cfg.config,
        split=split,
        revision=cfg.revision,
        subset=Subset(limit=limit) if limit else None,
    )


def _eval_set(cfg: TrainConfig, options: RunOptions) -> ImageSet | None:
    """The per-epoch evaluation split, or None; a missing split says how to skip it."""
    if not options.eval_split:
        return None
    try:
        return _load_split(cfg, options.eval_split, options.eval_limit)
    except DataSourceError as err:
        raise TrainingError(
            f"cannot load the evaluation split {options.eval_split!r} ({err}); pass "
            "--eval-split none to train without per-epoch evaluation"
        ) from err


# ----------------------------------------------------------------------------- the run


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


def _append_log(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


@dataclass
class _Run:
    """The pieces of one run the epoch loop works on."""

    cfg: TrainConfig
    options: RunOptions
    recipe: Recipe
    out: Path
    cfg_json: dict[str, Any]
    device: torch.device
    amp: torch.dtype | None
    model: nn.Module
    forward: Callable[[torch.Tensor], torch.Tensor]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    eval_set: ImageSet | None
    log: Path


def train(
    config: TrainConfig,
    out: Path | str,
    options: RunOptions | None = None,
    *,
    until_epoch: int | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train ``config`` into ``out``; with ``until_epoch`` stop (checkpointed) after that epoch.

    Raises TrainingError (bad options, checkpoint problems), DataSourceError (data), or
    ModelLoadError (architecture) — all CertbenchError.
    """
    cfg = config.resolved()
    options = options or RunOptions()
    recipe = get_recipe(cfg.recipe)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg_json = asdict(cfg)
    _check_resume(out, cfg_json, options.resume)
    device = _device(options)
    amp = _amp_dtype(options, device)
    _configure_torch(options, device)
    train_set = _load_split(cfg, "train", cfg.limit)
    mean, std = input_statistics(train_set, cfg.normalize)
    manifest = build_manifest(
        recipe=recipe,
        images=train_set,
        arch=cfg.arch,
        arch_kwargs=cfg.arch_kwargs,
        mean=mean,
        std=std,
        sigma=cfg.sigma,
        train_sigma=float(cfg.train_sigma or 0.0),
        epochs=cfg.epochs,
        seed=cfg.seed,
        benchmark=benchmark_name(cfg.dataset, cfg.benchmark),
    )
    channels_last = options.channels_last
    if channels_last is None:
        channels_last = device.type == "cuda"
    model = _build_model(cfg, manifest.num_classes, mean, std, device, channels_last)
    optimizer, scheduler = build_optimizer(model, cfg.schedule())
    start = 0
    if options.resume and read_state(out) is not None:
        start = load_checkpoint(out, model=model, optimizer=optimizer, scheduler=scheduler).epoch
    end = cfg.epochs if until_epoch is None else min(cfg.epochs, until_epoch)
    run = _Run(
        cfg,
        options,
        recipe,
        out,
        cfg_json,
        device,
        amp,
        model,
        _forward(model, compile=options.compile, channels_last=channels_last),
        optimizer,
        scheduler,
        _eval_set(cfg, options),
        out / LOG_FILE,
    )
    last = _epochs(run, train_set, start, end, on_epoch)
    weights, manifest_path = write_submission(out, model, manifest)
    done = read_state(out)
    epochs_done = int(done["epoch"]) if done else start
    _append_log(run.log, {"event": "end", "epochs_done": epochs_done, "time": time.time()})
    return TrainResult(out, weights, manifest_path, run.log, epochs_done, last)


def _configure_torch(options: RunOptions, device: torch.device) -> None:
    if options.threads is not None:
        if options.threads < 1:
            raise TrainingError(f"--threads must be >= 1, got {options.threads}")
        torch.set_num_threads(options.threads)
    if options.deterministic:
        torch.use_deterministic_algorithms(True)
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = True


def _build_model(
    cfg: TrainConfig,
    num_classes: int,
    mean: list[float],
    std: list[float],
    device: torch.device,
    channels_last: bool,
) -> nn.Module:
    """The registry classifier, initialised from ``derive_seed(seed, "init")``, on ``device``."""
    torch.manual_seed(derive_seed(cfg.seed, "init"))
    model = build_classifier(
        cfg.arch, num_classes=num_classes, mean=mean, std=std, **cfg.arch_kwargs
    ).to(device)
    return model.to(memory_format=torch.channels_last) if channels_last else model


def _loader(run: _Run, train_set: ImageSet, start: int, end: int) -> tuple[DataLoader, int, bool]:
    """DataLoader over (epoch, batch) keys of epochs start..end-1; workers; GPU-side views?"""
    options, device = run.options, run.device
    wanted = options.augment_device or ("cuda" if device.type == "cuda" else "cpu")
    if wanted == "cuda" and device.type != "cuda":
        raise TrainingError(
            f"--augment-device cuda needs training on CUDA, not {device}; drop the option"
        )
    gpu_views = wanted == "cuda" and run.recipe.views == "fouriermix"
    dataset = TrainBatches(
        train_set.images,
        train_set.labels,
        train_set.indices,
        run.recipe,
        seed=run.cfg.seed,
        gpu_views=gpu_views,
        augmix_config=AugMixConfig(variant=run.cfg.augmix_variant),
    )
    batch = int(run.cfg.batch_size or 0)
    sampler = EpochBatches(len(train_set), batch, seed=run.cfg.seed, start=start, end=end)
    workers = options.workers if options.workers is not None else _default_workers(device)
    loader = DataLoader(
        dataset,
        batch_size=None,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if workers else None,
    )
    return loader, workers, gpu_views


def _epochs(
    run: _Run,
    train_set: ImageSet,
    start: int,
    end: int,
    on_epoch: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """Train epochs start..end-1: steps, per-epoch log and evaluation, checkpoints."""
    loader, workers, gpu_views = _loader(run, train_set, start, end)
    _append_log(
        run.log,
        {
            "event": "start",
            "config": run.cfg_json,
            "start_epoch": start,
            "device": str(run.device),
            "amp": str(run.amp) if run.amp else None,
            "workers": workers,
            "gpu_views": gpu_views,
            "certbench_version": __version__,
            "torch_version": torch.__version__,
            "time": time.time(),
        },
    )
    steps_per_epoch = len(train_set) // int(run.cfg.batch_size or 1)
    last: dict[str, Any] = {}
    stats, step = _EpochStats(), 0
    show = run.options.progress
    with tqdm(total=len(loader), disable=not show, unit="step", dynamic_ncols=True) as bar:
        for batch in loader:
            epoch = int(batch["epoch"])
            if step == 0:
                torch.manual_seed(derive_seed(run.cfg.seed, "torch", epoch))
                run.model.train()
                stats = _EpochStats()
            stream = RandomStream(derive_seed(run.cfg.seed, "noise", epoch, step), run.device)
            result = _step(run, batch, stream)
            stats.add(result.loss.detach(), result.correct, int(batch["labels"].shape[0]))
            step += 1
            bar.update(1)
            if step % 10 == 0 or step == steps_per_epoch:
                bar.set_postfix_str(stats.postfix(epoch, run.cfg.epochs), refresh=False)
            if step == steps_per_epoch:
                step = 0
                last = _end_of_epoch(run, epoch, stats, end)
                if on_epoch is not None:
                    on_epoch(last)
    return last


def _step(run: _Run, batch: dict[str, Any], stream: RandomStream) -> StepResult:
    """One SGD step of the recipe on one batch."""
    views = _views_on_device(batch, run.recipe, run.device)
    labels = batch["labels"].to(run.device, non_blocking=True)
    with autocast(run.device, run.amp):
        result = recipe_loss(
            run.recipe,
            run.forward,
            views,
            labels,
            sigma=float(run.cfg.train_sigma or 0.0),
            stream=stream,
            lbd=run.cfg.lbd,
            eta=run.cfg.eta,
        )
    run.optimizer.zero_grad(set_to_none=True)
    result.loss.backward()
    run.optimizer.step()
    return result


def _end_of_epoch(run: _Run, epoch: int, stats: _EpochStats, end: int) -> dict[str, Any]:
    """Step the schedule, log (and evaluate) the epoch, checkpoint when due."""
    lr = run.optimizer.param_groups[0]["lr"]  # the rate this epoch used
    run.scheduler.step()
    record = _epoch_record(epoch, stats, lr)
    if run.eval_set is not None:
        record.update(
            evaluate(
                run.model,
                run.eval_set,
                sigma=run.cfg.sigma,
                seed=run.cfg.seed,
                device=run.device,
                amp=run.amp,
            )
        )
    _append_log(run.log, record)
    if (epoch + 1) % run.options.checkpoint_every == 0 or epoch + 1 == end:
        save_checkpoint(
            run.out,
            epoch=epoch + 1,
            model=run.model,
            optimizer=run.optimizer,
            scheduler=run.scheduler,
            config=run.cfg_json,
        )
    return record


def _default_workers(device: torch.device) -> int:
    """CPU runs augment in the main process (cores are for compute); GPU runs use workers."""
    if device.type != "cuda":
        return 0
    return max(1, min(8, (os.cpu_count() or 2) - 1))


def _forward(
    model: nn.Module, *, compile: bool, channels_last: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The training forward: optionally compiled, inputs in channels_last when the model is."""
    run: Callable[[torch.Tensor], torch.Tensor] = torch.compile(model) if compile else model  # type: ignore[assignment]
    if not channels_last:
        return run
    return lambda x: run(x.contiguous(memory_format=torch.channels_last))


def _views_on_device(batch: dict[str, Any], recipe: Recipe, device: torch.device) -> torch.Tensor:
    """The batch's views on the device; GPU-side FourierMix views are made here."""
    if "views" in batch:
        return batch["views"].to(device, non_blocking=True)
    base = batch["base"].to(device, non_blocking=True)
    return make_views(recipe, base, batch["seeds"])


class _EpochStats:
    """Running loss / accuracy of an epoch, kept on the device (one sync per bar refresh)."""

    def __init__(self) -> None:
        self.loss_sum: torch.Tensor | float = 0.0
        self.correct: torch.Tensor | int = 0
        self.images = 0
        self.steps = 0
        self.started = time.perf_counter()

    def add(self, loss: torch.Tensor, correct: torch.Tensor, images: int) -> None:
        self.loss_sum = self.loss_sum + loss.float()
        self.correct = self.correct + correct
        self.images += images
        self.steps += 1

    def values(self) -> tuple[float, float]:
        loss = float(self.loss_sum) / max(1, self.steps)
        return loss, float(self.correct) / max(1, self.images)

    def postfix(self, epoch: int, epochs: int) -> str:
        loss, acc = self.values()
        return f"epoch {epoch + 1}/{epochs} loss {loss:.4f} acc {acc:.3f}"


def _epoch_record(epoch: int, stats: _EpochStats, lr: float) -> dict[str, Any]:
    """The epoch's log record; refuses a diverged run (non-finite loss)."""
    loss, acc = stats.values()
    seconds = time.perf_counter() - stats.started
    if not math.isfinite(loss):
        raise TrainingError(
            f"training diverged in epoch {epoch + 1} (loss {loss}); lower --lr or check the data"
        )
    return {
        "event": "epoch",
        "epoch": epoch + 1,
        "lr": lr,
        "train_loss": loss,
        "train_accuracy": acc,
        "seconds": seconds,
        "images_per_second": stats.images / seconds if seconds > 0 else None,
    }
