"""Engine settings per device type, chosen from measurement rather than one constant.

Measured on CPU (Intel Xeon with AVX-512, 1 thread, ResNet-20, σ = 0.25, one process, noisy
samples/s; issue 28): the reference loop (one image at a time, batch 400, fp32) 918–954; the
engine in fp32 at batch 250: 983, at batch 1000 slower (the activations of a large batch leave
the caches); + torch.compile at batch 250: 1,290–1,313; bf16 autocast: 767–879, *slower*
without AMX. So on CPU: fp32, batches of 256, BatchNorm folded into the convolutions
(:func:`certbench.nets.fold_batchnorm`), and torch.compile once a run is long enough to repay
its compilation (tens of seconds for a ResNet on one core; :data:`AUTO_COMPILE_SAMPLES`) or the
model is compiled already in this process.

On CUDA: bf16 autocast (tensor cores; noise and x + δ stay fp32) and batches of 4,096, where a
CIFAR ResNet-110 keeps an H100 busy; ``scripts/gpu-check`` measures the batch sweep, fp32 vs bf16
and compile on the lent GPU and its report is the place to revise these figures.

None of these choices changes a certification count: counts do not depend on the batch size
(``certbench.smoothing.sampling``), and compiled and eager forwards agree outside near ties,
which the eager model settles. Only the precision (``amp``) changes the classifier's arithmetic,
so it is recorded with the run by callers that store records.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass

import torch

__all__ = ["AUTO", "AUTO_COMPILE_SAMPLES", "DEVICE_DEFAULTS", "EngineChoice", "engine_choice"]

AUTO = "auto"
"""The value of ``amp`` that asks for the device's default precision."""


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """Batch size, autocast precision (None: fp32) and whether to torch.compile."""

    batch_size: int
    amp: str | None
    compile: bool


DEVICE_DEFAULTS: dict[str, tuple[int, str | None]] = {
    "cpu": (256, None),
    "cuda": (4096, "bf16"),
}
"""Device type → (batch size, amp) when the caller leaves them to the engine; other device
types get cuda's."""

AUTO_COMPILE_SAMPLES = 1_000_000
"""Noisy samples in one call from which compiling repays itself several times over: at ~1,000
samples/s on one CPU core a 1.3× faster graph saves ~25 s per 100,000 samples, about what compiling
a ResNet costs on an idle core, and compiling on a busy machine has taken 20–40 s more. At 100,000
(break-even) a demo shard (91 images × 1,100 samples) compiled and ran past a 30 s shard time
limit on a loaded CI machine; at 1,000,000 ten images of the papers' protocol (n0 = 100,
n = 100,000) qualify and save ~4 minutes, and a demo shard never compiles."""


def compiler_available(device: torch.device) -> bool:
    """Whether torch.compile can generate code for `device` here: a C++ compiler for CPU
    (inductor's C++ backend), Triton for CUDA."""
    if device.type == "cpu":
        return any(shutil.which(name) for name in ("g++", "c++", "clang++"))
    return importlib.util.find_spec("triton") is not None


def engine_choice(
    device: torch.device,
    samples: int,
    *,
    batch_size: int | None,
    amp: str | None,
    compile: bool | None,
    compiled_already: bool = False,
) -> EngineChoice:
    """The settings of one certify/predict call: explicit arguments win; ``None`` (batch size,
    compile) and :data:`AUTO` (amp) take the device's defaults for a run of `samples` samples."""
    default_batch, default_amp = DEVICE_DEFAULTS.get(device.type, DEVICE_DEFAULTS["cuda"])
    if compile is None:
        compile = compiled_already or (
            samples >= AUTO_COMPILE_SAMPLES and compiler_available(device)
        )
    return EngineChoice(
        batch_size=default_batch if batch_size is None else batch_size,
        amp=default_amp if amp == AUTO else amp,
        compile=compile,
    )
