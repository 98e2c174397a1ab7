"""``train``: one recipe, one dataset, one architecture → a submission-ready model folder.

Output folder (``out``):

- ``model.safetensors`` and ``manifest.json``: what ``certbench certify`` and the REST API take
  (checked with :func:`certbench.loading.load_model` before the run returns);
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
seed 000 Appendix D "exclude[s] the input normalization layer", and its release keeps only an
input-centring layer (``get_input_center_layer``). ``"standardize"`` also divides by the
per-channel std (Cohen et al.'s NormalizeLayer); ``"none"`` uses mean 0, std 1.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from certbench import __version__
from certbench.architectures import build_classifier, check_kwargs
from certbench.data import ImageSet, Subset, load_images
from certbench.errors import CertbenchError, TrainingError
from certbench.loading import (
    Architecture,
    Manifest,
    Metadata,
    Preprocessing,
    Smoothing,
    load_manifest,
    load_model,
    save_weights,
)
from certbench.smoothing import derive_seed
from certbench.training.checkpoint import load_checkpoint, read_state, save_checkpoint
from certbench.training.data import EpochBatches, TrainBatches, make_views
from certbench.training.recipes import Recipe, get_recipe, recipe_loss
from certbench.training.schedule import Schedule, build_optimizer

__all__ = ["RunOptions", "TrainConfig", "TrainResult", "evaluate", "train"]

Normalize = Literal["center", "standardize", "none"]
LOG_FILE = "train_log.jsonl"
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines the trained weights (stored in checkpoints and the log).

    ``batch_size``, ``lbd`` and ``eta`` default to the recipe's values (None = default).
    ``sigma`` is the smoothing noise of the manifest; the training noise ``train_sigma``
    defaults to it (``train_sigma=0`` trains without noise, Cohen et al.'s "noise_0.00" models).
    """

    recipe: str
    dataset: str
    arch: str = "cifar_resnet110"
    arch_kwargs: dict[str, int | float] = field(default_factory=dict)
    sigma: float = 0.25
    train_sigma: float | None = None
    epochs: int = 200
    batch_size: int | None = None
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    lbd: float | None = None
    eta: float | None = None
    seed: int = 0
    normalize: Normalize = "center"
    config: str | None = None
    revision: str | None = None
    limit: int | None = None
    benchmark: str | None = None

    def resolved(self) -> TrainConfig:
        """A copy with the recipe defaults filled in and every field checked."""
        recipe = get_recipe(self.recipe)
        if not self.sigma > 0:
            raise TrainingError(f"sigma must be > 0, got {self.sigma!r}")
        if self.train_sigma is not None and not self.train_sigma >= 0:
            raise TrainingError(f"train_sigma must be >= 0, got {self.train_sigma!r}")
        if self.normalize not in ("center", "standardize", "none"):
            raise TrainingError(
                f"normalize must be center, standardize or none, got {self.normalize!r}"
            )
        check_kwargs(self.arch, self.arch_kwargs)
        lbd, eta = recipe.default_weights(self.dataset)
        batch = recipe.batch_size if self.batch_size is None else self.batch_size
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 2:
            raise TrainingError(f"batch_size must be an integer >= 2, got {batch!r}")
        Schedule(self.epochs, self.lr, self.momentum, self.weight_decay)  # validates
        return replace(
            self,
            train_sigma=self.sigma if self.train_sigma is None else self.train_sigma,
            batch_size=batch,
            lbd=lbd if self.lbd is None else self.lbd,
            eta=eta if self.eta is None else self.eta,
        )

    def schedule(self) -> Schedule:
        return Schedule(self.epochs, self.lr, self.momentum, self.weight_decay)


@dataclass(frozen=True)
class RunOptions:
    """How to run (never changes the intended weights; GPU runs are not bitwise reproducible)."""

    device: str | None = None
    amp: Literal["bf16", "fp16", "auto"] | None = "auto"
    channels_last: bool | None = None
    compile: bool = False
    workers: int | None = None
    augment_device: Literal["cpu", "cuda"] | None = None
    eval_split: str | None = "test"
    eval_limit: int | None = None
    checkpoint_every: int = 1
    resume: bool = False
    deterministic: bool = False
    threads: int | None = None
    progress: bool = True


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
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if amp not in dtypes:
        raise TrainingError(f"--amp must be bf16, fp16 or none, got {amp!r}")
    return dtypes[amp]


def _benchmark_name(cfg: TrainConfig) -> str:
    if cfg.benchmark:
        return cfg.benchmark
    path = Path(cfg.dataset).expanduser()
    return path.resolve().name if path.exists() else cfg.dataset


def _preprocessing(images: ImageSet, normalize: Normalize) -> tuple[list[float], list[float]]:
    """Per-channel mean/std of the training images in [0, 1], rounded to 4 decimals."""
    channels = images.images.shape[1]
    if normalize == "none":
        return [0.0] * channels, [1.0] * channels
    pixels = images.images.to(torch.float64).div(255.0).transpose(0, 1).reshape(channels, -1)
    mean = [round(float(v), 4) for v in pixels.mean(dim=1)]
    if normalize == "center":
        return mean, [1.0] * channels
    return mean, [round(max(float(v), 1e-4), 4) for v in pixels.std(dim=1)]


def _load_split(cfg: TrainConfig, split: str, limit: int | None) -> ImageSet:
    return load_images(
        cfg.dataset,
        config=cfg.config,
        split=split,
        revision=cfg.revision,
        subset=Subset(limit=limit) if limit else None,
    )


def build_manifest(
    cfg: TrainConfig, recipe: Recipe, images: ImageSet, mean: list[float], std: list[float]
) -> Manifest:
    """The submission manifest of a run (architecture, classes, preprocessing, σ, provenance)."""
    arch_text = cfg.arch + (
        "(" + ", ".join(f"{k}={v}" for k, v in sorted(cfg.arch_kwargs.items())) + ")"
        if cfg.arch_kwargs
        else ""
    )
    return Manifest(
        benchmark=_benchmark_name(cfg),
        architecture=Architecture(name=cfg.arch, kwargs=dict(cfg.arch_kwargs)),
        num_classes=len(images.class_names),
        preprocessing=Preprocessing(mean=tuple(mean), std=tuple(std)),
        smoothing=Smoothing(sigma=cfg.sigma),
        metadata=Metadata(
            name=f"{recipe.title}, training σ={cfg.train_sigma:g}, {arch_text}, "
            f"{cfg.epochs} epochs (certbench train, seed {cfg.seed})",
            paper_url=recipe.paper_url,  # type: ignore[arg-type]
            code_url=recipe.code_url,  # type: ignore[arg-type]
        ),
        input_size=tuple(images.images.shape[1:]),  # type: ignore[arg-type]
    )


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate(
    model: nn.Module,
    images: ImageSet,
    *,
    sigma: float,
    seed: int,
    device: torch.device,
    amp: torch.dtype | None = None,
    batch_size: int = 500,
) -> dict[str, float]:
    """Clean accuracy and accuracy under one draw of N(0, σ²) noise (seeded per batch start)."""
    model.eval()
    correct_clean = correct_noisy = 0
    generator = torch.Generator(device=device)
    for start in range(0, len(images), batch_size):
        x = images.images[start : start + batch_size].to(device).float().div_(255.0)
        y = images.labels[start : start + batch_size].to(device)
        generator.manual_seed(derive_seed(seed, "eval", start))
        noise = torch.randn(x.shape, generator=generator, device=device)
        with _autocast(device, amp):
            clean = model(x).argmax(dim=-1)
            noisy = model(x + sigma * noise).argmax(dim=-1)
        correct_clean += int((clean == y).sum())
        correct_noisy += int((noisy == y).sum())
    return {
        "eval_clean_accuracy": correct_clean / len(images),
        "eval_noisy_accuracy": correct_noisy / len(images),
    }


def _autocast(device: torch.device, amp: torch.dtype | None) -> AbstractContextManager[Any]:
    if amp is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=amp)


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
    if options.threads is not None:
        if options.threads < 1:
            raise TrainingError(f"--threads must be >= 1, got {options.threads}")
        torch.set_num_threads(options.threads)
    if options.deterministic:
        torch.use_deterministic_algorithms(True)
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    train_set = _load_split(cfg, "train", cfg.limit)
    eval_set = None
    if options.eval_split:
        eval_set = _load_split(cfg, options.eval_split, options.eval_limit)
    mean, std = _preprocessing(train_set, cfg.normalize)
    manifest = build_manifest(cfg, recipe, train_set, mean, std)

    torch.manual_seed(derive_seed(cfg.seed, "init"))
    model = build_classifier(
        cfg.arch, num_classes=manifest.num_classes, mean=mean, std=std, **cfg.arch_kwargs
    )
    channels_last = options.channels_last
    if channels_last is None:
        channels_last = device.type == "cuda"
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    schedule = cfg.schedule()
    optimizer, scheduler = build_optimizer(model, schedule)
    start = 0
    if options.resume and read_state(out) is not None:
        start = load_checkpoint(out, model=model, optimizer=optimizer, scheduler=scheduler).epoch
    end = cfg.epochs if until_epoch is None else min(cfg.epochs, until_epoch)
    forward = _forward(model, compile=options.compile, channels_last=channels_last)
    gpu_views = (options.augment_device or ("cuda" if device.type == "cuda" else "cpu")) == "cuda"
    gpu_views = gpu_views and recipe.views == "fouriermix"
    dataset = TrainBatches(
        train_set.images,
        train_set.labels,
        train_set.indices,
        recipe,
        seed=cfg.seed,
        gpu_views=gpu_views,
    )
    assert cfg.batch_size is not None  # resolved
    sampler = EpochBatches(len(train_set), cfg.batch_size, seed=cfg.seed, start=start, end=end)
    workers = options.workers if options.workers is not None else _default_workers(device)
    loader = DataLoader(
        dataset,
        batch_size=None,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if workers else None,
    )
    log_path = out / LOG_FILE
    _append_log(
        log_path,
        {
            "event": "start",
            "config": cfg_json,
            "start_epoch": start,
            "device": str(device),
            "amp": str(amp) if amp else None,
            "workers": workers,
            "gpu_views": gpu_views,
            "certbench_version": __version__,
            "torch_version": torch.__version__,
            "time": time.time(),
        },
    )
    last: dict[str, Any] = {}
    steps_per_epoch = sampler.steps_per_epoch()
    noise_generator = torch.Generator(device=device)
    bar = tqdm(total=len(sampler), disable=not options.progress, unit="step", dynamic_ncols=True)
    epoch_stats = _EpochStats()
    step = 0
    try:
        for batch in loader:
            epoch = int(batch["epoch"])
            if step == 0:
                torch.manual_seed(derive_seed(cfg.seed, "torch", epoch))
                model.train()
                epoch_stats = _EpochStats()
            views = _views_on_device(batch, recipe, device)
            labels = batch["labels"].to(device, non_blocking=True)
            noise_generator.manual_seed(derive_seed(cfg.seed, "noise", epoch, step))
            with _autocast(device, amp):
                result = recipe_loss(
                    recipe,
                    forward,
                    views,
                    labels,
                    sigma=float(cfg.train_sigma or 0.0),
                    generator=noise_generator,
                    lbd=cfg.lbd,
                    eta=cfg.eta,
                )
            optimizer.zero_grad(set_to_none=True)
            result.loss.backward()
            optimizer.step()
            epoch_stats.add(result.loss.detach(), result.correct, labels.shape[0])
            step += 1
            bar.update(1)
            if step % 10 == 0 or step == steps_per_epoch:
                bar.set_postfix_str(epoch_stats.postfix(epoch, cfg.epochs), refresh=False)
            if step < steps_per_epoch:
                continue
            step = 0
            lr = optimizer.param_groups[0]["lr"]  # the rate this epoch used
            scheduler.step()
            last = _finish_epoch(epoch, epoch_stats, lr, model, eval_set, cfg, device, amp)
            _append_log(log_path, last)
            if on_epoch is not None:
                on_epoch(last)
            if (epoch + 1) % options.checkpoint_every == 0 or epoch + 1 == end:
                save_checkpoint(
                    out,
                    epoch=epoch + 1,
                    model=model,
                    optimizer=optimizer,
                    scheduler=scheduler,
                    config=cfg_json,
                )
    finally:
        bar.close()
    weights, manifest_path = _write_outputs(out, model, manifest)
    done = read_state(out)
    epochs_done = int(done["epoch"]) if done else start
    _append_log(log_path, {"event": "end", "epochs_done": epochs_done, "time": time.time()})
    return TrainResult(out, weights, manifest_path, log_path, epochs_done, last)


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


def _finish_epoch(
    epoch: int,
    stats: _EpochStats,
    lr: float,
    model: nn.Module,
    eval_set: ImageSet | None,
    cfg: TrainConfig,
    device: torch.device,
    amp: torch.dtype | None,
) -> dict[str, Any]:
    loss, acc = stats.values()
    seconds = time.perf_counter() - stats.started
    if not math.isfinite(loss):
        raise TrainingError(
            f"training diverged in epoch {epoch + 1} (loss {loss}); lower --lr or check the data"
        )
    record: dict[str, Any] = {
        "event": "epoch",
        "epoch": epoch + 1,
        "lr": lr,
        "train_loss": loss,
        "train_accuracy": acc,
        "seconds": seconds,
        "images_per_second": stats.images / seconds if seconds > 0 else None,
    }
    if eval_set is not None:
        record.update(
            evaluate(model, eval_set, sigma=cfg.sigma, seed=cfg.seed, device=device, amp=amp)
        )
    return record


def _write_outputs(out: Path, model: nn.Module, manifest: Manifest) -> tuple[Path, Path]:
    """model.safetensors + manifest.json, then load them back the way a submission is loaded."""
    weights = out / WEIGHTS_FILE
    manifest_path = out / MANIFEST_FILE
    cpu_model = model.to("cpu", memory_format=torch.contiguous_format)
    save_weights(cpu_model, weights)
    manifest_path.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    try:
        load_model(weights, load_manifest(manifest_path))
    except CertbenchError as err:
        raise TrainingError(f"the written model does not load as a submission: {err}") from err
    return weights, manifest_path
