"""Per-image cost on the device of each stage's computation, and training images/s per recipe.

The service's stages (``models/stages``) call these certbench functions; their plug-in code
needs the database layer, which the GPU image cannot import, so the computations are timed
directly: PD robustness (``certbench.pd.robust_accuracy``, exact projection), the Fourier
heatmap (``certbench.fourier.sensitivity_records``, base map and smoothed cells), the Fourier
lens (``certbench.lens.lens_records``) and the weather attack (``certbench.weather.attack_base``).
Each row names the reduced protocol it ran (the full protocols take hours per model) and the
seconds per unit, so a full run's cost scales from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn

from certbench.augment import RandomStream
from certbench.fourier import sensitivity_records
from certbench.lens import LensProtocol, lens_records
from certbench.pd import build_anchor_bank, robust_accuracy
from certbench.training import (
    RECIPES,
    Schedule,
    TrainBatches,
    build_optimizer,
    make_views,
    recipe_loss,
)
from certbench.weather import AttackConfig, attack_base
from scripts.gpu_check.certification import build_model, sync


@dataclass(frozen=True)
class StageSizes:
    arch: str
    images: int
    pd_iter: int
    heat_points: int
    heat_n: int
    lens_paths: int
    weather_steps: int
    train_batch: int
    train_steps: int


FULL = StageSizes("cifar_resnet110", images=32, pd_iter=20, heat_points=4, heat_n=2000,
                  lens_paths=8, weather_steps=10, train_batch=256, train_steps=6)  # fmt: skip
DRY = StageSizes("lenet5", images=2, pd_iter=2, heat_points=1, heat_n=20, lens_paths=1,
                 weather_steps=1, train_batch=4, train_steps=1)  # fmt: skip


def _timed(device: torch.device, fn: Callable[[], object]) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def _data(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 256, (count, 3, 32, 32), generator=g, dtype=torch.uint8)
    return x, torch.arange(count) % 10


def stage_rows(device: torch.device, sizes: StageSizes) -> list[dict[str, object]]:
    """Seconds per unit of each stage's computation on a reduced protocol (named per row)."""
    model = build_model(sizes.arch, device)
    x8, y = _data(max(sizes.images, 20))
    x = x8.float() / 255
    n = sizes.images
    rows: list[dict[str, object]] = []

    def add(stage: str, protocol: str, units: int, unit: str, fn: Callable[[], object]) -> None:
        seconds = _timed(device, fn)
        rows.append({"stage": stage, "protocol": protocol, "units": units, "unit": unit,
                     "seconds": seconds, "seconds_per_unit": seconds / units})  # fmt: skip

    bank = build_anchor_bank(x8, y, class_names=[str(c) for c in range(10)], dataset="noise",
                             k=2, seed=0)  # fmt: skip
    add("pd_robustness", f"eps 8/255, {sizes.pd_iter} APGD steps, 1 target, exact projection",
        n, "image", lambda: robust_accuracy(model, x[:n], y[:n], anchors=bank, eps_list=(8 / 255,),
                                            n_iter=sizes.pd_iter, n_target_classes=1,
                                            device=device))  # fmt: skip
    points = [(i, i + 1) for i in range(sizes.heat_points)]
    protocol = SimpleNamespace(name="quick", epsilon=4.0, n0=100, n=sizes.heat_n, alpha=0.001,
                               channel_signs="shared")  # fmt: skip
    add("fourier_heatmap (base map)", "ε = 4, base classifier", n * len(points), "point × image",
        lambda: sensitivity_records(model, x[:n], y[:n], list(range(n)), points, protocol,
                                    sigma=None, device=device))  # fmt: skip
    add("fourier_heatmap (smoothed)", f"ε = 4, σ = 0.25, n0 = 100, n = {sizes.heat_n}",
        min(n, 4) * len(points), "point × image",
        lambda: sensitivity_records(model, x[: min(n, 4)], y[: min(n, 4)], list(range(min(n, 4))),
                                    points, protocol, sigma=0.25, device=device))  # fmt: skip
    lens = LensProtocol(paths=sizes.lens_paths, steps=100, pixel_pairs=1, jacobian_images=n)
    add("fourier_lens", f"{sizes.lens_paths} Fourier paths × 100 steps, 1 pixel pair per class "
        f"pair, {n} exact Jacobians", 1, "run",
        lambda: lens_records(model, x[:20], y[:20], protocol=lens, device=device))  # fmt: skip
    add("weather_attack", f"rain + snow, severity 3, PGD-{sizes.weather_steps}, 2 restarts",
        2 * n, "set × image",
        lambda: attack_base(model, x[:n], y[:n], weathers=("rain", "snow"), severities=(3,),
                            config=AttackConfig(steps=sizes.weather_steps, restarts=2),
                            device=device))  # fmt: skip
    return rows


def training_rows(device: torch.device, sizes: StageSizes, amp: str | None) -> list[dict]:
    """Training images/s per recipe (bf16 autocast, channels-last), after one warm-up step."""
    images, labels = _data(sizes.train_batch * (sizes.train_steps + 1))
    rows = []
    b = sizes.train_batch
    for name, recipe in RECIPES.items():
        torch.manual_seed(0)
        model = build_model(sizes.arch, device).train().to(memory_format=torch.channels_last)
        optimizer, _ = build_optimizer(model, Schedule())
        gpu_views = device.type == "cuda" and recipe.views == "fouriermix"
        data = TrainBatches(images, labels, torch.arange(len(images)), recipe, seed=0,
                            gpu_views=gpu_views)  # fmt: skip
        lbd, eta = recipe.default_weights("cifar10")

        def step(i: int, model: nn.Module = model, optimizer=optimizer, data=data,
                 recipe=recipe, lbd=lbd, eta=eta) -> None:  # fmt: skip
            batch = data[(0, list(range(i * b, (i + 1) * b)))]
            if "views" in batch:
                views = batch["views"].to(device)
            else:
                views = make_views(recipe, batch["base"].to(device), batch["seeds"])
            dtype = torch.bfloat16 if amp == "bf16" else torch.float32
            with torch.autocast(device.type, dtype=dtype, enabled=amp is not None):
                result = recipe_loss(
                    recipe, lambda v: model(v.contiguous(memory_format=torch.channels_last)),
                    views, batch["labels"].to(device), sigma=0.25,
                    stream=RandomStream(i, device), lbd=lbd, eta=eta,
                )  # fmt: skip
            optimizer.zero_grad(set_to_none=True)
            result.loss.backward()
            optimizer.step()

        step(sizes.train_steps)  # warm-up on the last batch
        seconds = _timed(device, lambda step=step: [step(i) for i in range(sizes.train_steps)])
        rows.append({"recipe": name, "arch": sizes.arch, "batch": b,
                     "precision": amp or "fp32",
                     "images_per_s": b * sizes.train_steps / seconds,
                     "passes_per_image": recipe.num_views * recipe.noise_samples})  # fmt: skip
    return rows
