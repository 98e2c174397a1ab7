"""Certification throughput of Cohen et al.'s ResNet-110 (σ = 0.25, CIFAR-shaped inputs).

Noisy samples/s of ``certbench.smoothing.certify`` in fp32, bf16 and bf16 + torch.compile, a
batch-size sweep, the engine's device defaults, and the reference loop (one image at a time,
400 samples per batch, fp32 NCHW, fresh ``randn_like`` noise, counts to the host after every
batch: Cohen et al.'s ``core.py`` as released) in the same process on the same weights.
Each figure is the median of ``repeats`` timed runs after one warm-up (compilation and cuDNN's
algorithm choice happen there).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from certbench.nets import build_classifier
from certbench.smoothing import certify
from certbench.smoothing.defaults import engine_choice

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
SIGMA = 0.25


@dataclass(frozen=True)
class Sizes:
    """Workload of one run: images × (n0 + n) samples per timed certify call."""

    arch: str
    images: int
    n0: int
    n: int
    reference_samples: int
    batch_sweep: tuple[int, ...]
    repeats: int


FULL = Sizes("cifar_resnet110", images=2, n0=100, n=100_000, reference_samples=20_000,
             batch_sweep=(1024, 2048, 4096, 8192, 16384), repeats=2)  # fmt: skip
DRY = Sizes("cifar_resnet20", images=1, n0=10, n=120, reference_samples=130,
            batch_sweep=(32, 64), repeats=1)  # fmt: skip


def build_model(arch: str, device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    model = build_classifier(arch, num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD)
    return model.eval().to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def certify_rate(
    model: nn.Module,
    device: torch.device,
    sizes: Sizes,
    *,
    batch_size: int | None,
    amp: str | None,
    compile: bool | None,
) -> float:
    """Median noisy samples/s of certify on ``sizes`` (after one warm-up call)."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(sizes.images, 3, 32, 32, generator=g)
    y = torch.zeros(sizes.images, dtype=torch.long)
    kwargs = dict(sigma=SIGMA, device=device, batch_size=batch_size, amp=amp, compile=compile)
    warm_n = max(batch_size or 1, 2 * (batch_size or 512))
    certify(model, x[:1], y[:1], n0=sizes.n0, n=warm_n, **kwargs)
    rates = []
    for _ in range(sizes.repeats):
        sync(device)
        start = time.perf_counter()
        certify(model, x, y, n0=sizes.n0, n=sizes.n, **kwargs)
        sync(device)
        rates.append(sizes.images * (sizes.n0 + sizes.n) / (time.perf_counter() - start))
    return statistics.median(rates)


def reference_rate(model: nn.Module, device: torch.device, sizes: Sizes) -> float:
    """Samples/s of the reference loop: one image, batches of 400, fp32 NCHW, host counts."""
    model = model.to(memory_format=torch.contiguous_format)
    x = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(1)).to(device)

    def run(total: int) -> None:
        counts = np.zeros(10, dtype=np.int64)
        with torch.no_grad():
            for start in range(0, total, 400):
                batch = x.unsqueeze(0).repeat(min(400, total - start), 1, 1, 1)
                noisy = batch + torch.randn_like(batch) * SIGMA
                counts += np.bincount(model(noisy).argmax(1).cpu().numpy(), minlength=10)

    run(800)  # warm-up
    rates = []
    for _ in range(sizes.repeats):
        sync(device)
        start = time.perf_counter()
        run(sizes.reference_samples)
        sync(device)
        rates.append(sizes.reference_samples / (time.perf_counter() - start))
    return statistics.median(rates)


def certification_rows(
    device: torch.device, sizes: Sizes, *, compile_ok: bool
) -> list[dict[str, object]]:
    """One row per configuration: name, batch, precision, compile, samples/s, vs reference."""
    model = build_model(sizes.arch, device)
    reference = reference_rate(model, device, sizes)
    rows: list[dict[str, object]] = [
        {"config": "reference loop", "batch": 400, "precision": "fp32", "compile": False,
         "samples_per_s": reference},
    ]  # fmt: skip
    samples = sizes.images * (sizes.n0 + sizes.n)
    # the device's default batch: the "defaults" row then reuses the compiled graph of the
    # "bf16 + compile" row (one compilation, not two, inside the time budget)
    big = engine_choice(device, samples, batch_size=None, amp=None, compile=False).batch_size
    if device.type == "cpu":
        big = sizes.batch_sweep[-1]
    configs = [
        ("defaults", None, "auto", None),
        ("fp32", big, None, False),
        ("bf16", big, "bf16", False),
        ("bf16 + compile", big, "bf16", compile_ok),
    ]
    configs += [(f"bf16 batch {b}", b, "bf16", False) for b in sizes.batch_sweep if b != big]
    for name, batch, amp, compiled in configs:
        rate = certify_rate(model, device, sizes, batch_size=batch, amp=amp, compile=compiled)
        chosen = engine_choice(device, samples, batch_size=batch, amp=amp, compile=compiled)
        rows.append({"config": name, "batch": chosen.batch_size, "precision": chosen.amp or "fp32",
                     "compile": chosen.compile, "samples_per_s": rate})  # fmt: skip
    for row in rows:
        row["vs_reference"] = float(row["samples_per_s"]) / reference  # type: ignore[arg-type]
    if not compile_ok:
        rows[4]["note"] = "compile not run (dry run): the eager path was timed"
    return rows
