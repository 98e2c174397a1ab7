"""How long and how much memory a sampling command will take, estimated before it starts; past a
limit it is refused with the estimate (issue 34 §6: ``certify --n 100000000000000`` ran 77-106 s,
showed "0.00/36.4P", then died in the allocator asking for 800000000000808 bytes).

Two checks, both before any sample is drawn:

1. :func:`check_floor`, at once, from the options alone (nothing loaded): the memory the sampling
   engine allocates per image in flight whatever the model and device. CERTIFY and PREDICT keep
   one 8-byte slot per noisy sample of every image of a wave for the near-tie settlement
   (``certbench.smoothing.sampling``: ``_NearTies``) and the seeds of its noise blocks (one per
   ``NOISE_BLOCK`` samples): n = 10^14 needs 800 TB, and is refused before anything loads.
2. :func:`check_run`, once the model and the images are loaded: the run's forward passes over
   the throughput measured on one batch of the real model on the real device, and the peak
   memory (the slots, the noise and batch tensors; on CUDA the model's activations as that batch
   measured them) against the memory the device has free. A run shorter than
   ``PROBE_BATCHES`` batches is not timed: measuring would cost a noticeable share of it, and
   it cannot approach any limit worth setting.

The limits are options of every sampling command: ``--max-hours`` (``CERTBENCH_MAX_HOURS``,
default a week) and ``--max-memory-gb`` (``CERTBENCH_MAX_MEMORY_GB``, default: what the device
has free). Everything here imports only the standard library at module level.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from certbench.cli.checks import Bounds
from certbench.errors import CertbenchError

if TYPE_CHECKING:
    import torch

DEFAULT_MAX_HOURS = 168.0
"""A week: the papers' longest runs (CERTIFY on ImageNet at n = 100,000, a full CIFAR-10 test
set) take hours to days on one GPU; beyond a week a run is almost surely a typo."""

PROBE_BATCHES = 20
"""Runs of more forward passes than this many batches are timed on one batch first (5 %)."""

CODE_BYTES = 8
"""One int64 near-tie slot per noisy sample of an image in flight."""
NOISE_BLOCK = 500
"""Samples per noise block (``certbench.smoothing.sampling.NOISE_BLOCK``; a test keeps them
equal): one 64-bit seed per block, held as a Python int while the image is sampled."""
SEED_BYTES = 8 + 36
"""A block seed: 8 bytes in the NumPy array, about 36 as the Python int of its list."""
FLOAT_BYTES = 4
BATCH_COPIES = 3
"""fp32 tensors of a batch's size alive at once: the noise block, its scaled copy, x + noise."""

MaxHours = Annotated[
    float,
    typer.Option(
        "--max-hours",
        envvar="CERTBENCH_MAX_HOURS",
        help="Refuse a run estimated to take longer (hours).",
        callback=Bounds(0, low_open=True, meaning="the time limit"),
    ),
]
MaxMemory = Annotated[
    float | None,
    typer.Option(
        "--max-memory-gb",
        envvar="CERTBENCH_MAX_MEMORY_GB",
        help="Refuse a run estimated to need more memory (GB); default: what the device has free.",
        callback=Bounds(0, low_open=True, meaning="the memory limit"),
    ),
]


class BudgetError(CertbenchError):
    """A run refused before it started: its estimate exceeds a limit."""


@dataclass(frozen=True)
class Limits:
    """The time limit (seconds) and the memory limit (bytes; None: the device's free memory)."""

    seconds: float
    memory_bytes: float | None

    @classmethod
    def of(cls, max_hours: float, max_memory_gb: float | None) -> Limits:
        memory = None if max_memory_gb is None else max_memory_gb * 1e9
        return cls(seconds=max_hours * 3600, memory_bytes=memory)


@dataclass(frozen=True)
class Sampling:
    """The noisy samples the smoothing engine draws: per image, the samples of each phase
    (CERTIFY: n0 and n; PREDICT: n), for ``images`` images."""

    images: int
    per_image: tuple[int, ...]

    @property
    def samples_per_image(self) -> int:
        return sum(self.per_image)

    @property
    def forward_passes(self) -> int:
        return self.images * self.samples_per_image

    def bytes_per_image(self) -> int:
        """Bytes the engine holds per image in flight, whatever the model: its near-tie slots
        and its noise blocks' seeds."""
        seeds = sum(math.ceil(count / NOISE_BLOCK) for count in self.per_image) * SEED_BYTES
        return self.samples_per_image * CODE_BYTES + seeds


def check_floor(what: str, per_image: tuple[int, ...], limits: Limits) -> None:
    """Refuse at once a run whose memory for one image in flight alone exceeds the limit (or,
    without one, this machine's physical memory: the engine needs it on any device)."""
    one = Sampling(1, per_image)
    floor = one.bytes_per_image()
    limit = limits.memory_bytes if limits.memory_bytes is not None else physical_memory()
    if limit is not None and floor > limit:
        raise BudgetError(
            f"{what} refused before loading anything: {one.samples_per_image:,} noisy samples "
            f"(forward passes) per image need at least {gigabytes(floor)} of memory for one "
            "image in flight (8 bytes per sample for the near-tie settlement, and the seeds of "
            f"the noise blocks), over the limit of {gigabytes(limit)}. Lower --n (the papers "
            "use 100,000), or raise --max-memory-gb / CERTBENCH_MAX_MEMORY_GB"
        )


@dataclass(frozen=True)
class Estimate:
    """A run's estimated seconds (None: not timed, a short run), peak memory and how."""

    seconds: float | None
    memory_bytes: int
    basis: str

    def describe(self) -> str:
        timed = "not timed (short)" if self.seconds is None else duration(self.seconds)
        return f"about {timed} and {gigabytes(self.memory_bytes)} ({self.basis})"


def check_smoothing(
    what: str,
    sampling: Sampling,
    limits: Limits,
    *,
    model: Any,
    image_shape: tuple[int, ...],
    batch_size: int | None,
    amp: str | None,
    other_passes: int = 0,
) -> Estimate:
    """:func:`check_run` for a run of the smoothing engine (CERTIFY, PREDICT and the commands
    built on them): its batch size and waves of images as the engine will choose them;
    ``other_passes``: forward passes the command runs besides the engine's (an attack's)."""
    from certbench.smoothing import engine_choice, waves

    device = model_device(model)
    choice = engine_choice(
        device, sampling.forward_passes, batch_size=batch_size, amp=amp, compile=False
    )
    first = next(waves(max(1, sampling.images), sampling.samples_per_image, choice.batch_size))
    numel = math.prod(image_shape)
    peak = (
        (first.stop - first.start) * sampling.bytes_per_image()
        + BATCH_COPIES * choice.batch_size * numel * FLOAT_BYTES
        + sampling.images * numel * FLOAT_BYTES
    )
    return check_run(
        what,
        forward_passes=sampling.forward_passes + other_passes,
        peak_bytes=peak,
        limits=limits,
        model=model,
        image_shape=image_shape,
        batch_size=choice.batch_size,
        amp=choice.amp,
    )


def check_run(
    what: str,
    *,
    forward_passes: int,
    peak_bytes: int,
    limits: Limits,
    model: Any,
    image_shape: tuple[int, ...],
    batch_size: int,
    amp: str | None = None,
) -> Estimate:
    """Estimate a run of ``forward_passes`` on the loaded model and its device, with
    ``peak_bytes`` of data besides the model's activations; refuse it past a limit. Returns
    the estimate."""
    device = model_device(model)
    probe = None
    if forward_passes > PROBE_BATCHES * batch_size:
        probe = measure_batch(model, image_shape, device, batch_size, amp)
    memory = peak_bytes + (probe.activation_bytes if probe is not None else 0)
    seconds = None
    basis = f"{forward_passes:,} forward passes"
    if probe is not None:
        rate = batch_size / probe.seconds
        seconds = forward_passes / rate
        basis += f" at {rate:,.0f} samples/s measured on one batch of {batch_size} on {device}"
    estimate = Estimate(seconds=seconds, memory_bytes=memory, basis=basis)
    available, source = limits.memory_bytes, "--max-memory-gb"
    if available is None:
        available, source = free_memory(device), f"free on {device}"
    if available is not None and memory > available:
        raise BudgetError(
            f"{what} refused before sampling: estimated {estimate.describe()}, over the "
            f"{gigabytes(available)} {source}. Lower --n, --batch-size or the images "
            "(--limit), or raise --max-memory-gb / CERTBENCH_MAX_MEMORY_GB"
        )
    if seconds is not None and seconds > limits.seconds:
        raise BudgetError(
            f"{what} refused before sampling: estimated {estimate.describe()}, over the limit "
            f"of {duration(limits.seconds)}. Lower --n or the images (--skip, --limit), use a "
            "faster device, or raise --max-hours / CERTBENCH_MAX_HOURS"
        )
    return estimate


def model_device(model: Any) -> torch.device:
    """The device of the model's first parameter (CPU for a model without any)."""
    import torch

    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


@dataclass(frozen=True)
class Probe:
    """One timed forward batch: its seconds and (CUDA) the memory its activations took."""

    seconds: float
    activation_bytes: int


def measure_batch(
    model: Any,
    image_shape: tuple[int, ...],
    device: torch.device,
    batch_size: int,
    amp: str | None = None,
) -> Probe:
    """Time one forward of ``batch_size`` noisy inputs (after one warm-up batch) on ``device``,
    in inference mode and under ``amp`` autocast (bf16, fp16) as the engine runs the model."""
    import torch

    inputs = torch.rand((batch_size, *image_shape), device=device)
    cuda = device.type == "cuda"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp or "")
    with (
        torch.inference_mode(),
        torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None),
    ):
        model(inputs)  # warm-up: kernels chosen, caches filled
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        started = time.perf_counter()
        model(inputs)
        if cuda:
            torch.cuda.synchronize(device)
        seconds = max(time.perf_counter() - started, 1e-9)
    activations = torch.cuda.max_memory_allocated(device) - before if cuda else 0
    return Probe(seconds=seconds, activation_bytes=max(0, activations))


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: CUDA's free memory, else the host's available memory."""
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return available_memory()


def available_memory() -> int | None:
    """The host's available memory (Linux ``MemAvailable``), None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return physical_memory()


def physical_memory() -> int | None:
    """The host's physical memory, None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def gigabytes(value: float) -> str:
    """``800,000 GB``, ``1.6 GB``, ``0.004 GB``."""
    gb = value / 1e9
    return f"{gb:,.0f} GB" if gb >= 100 else f"{gb:.3g} GB"


def duration(seconds: float) -> str:
    """``3.2 h``, ``41 min``, ``12 s``, ``3.2e+04 years``."""
    if seconds >= 365 * 86400:
        return f"{seconds / (365 * 86400):.3g} years"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"
