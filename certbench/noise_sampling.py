"""The sampling engine of randomized smoothing: class counts of f(x + ε), ε ~ N(0, σ²I), fast.

CERTIFY and PREDICT (Cohen, Rosenfeld & Kolter 2019; ``certbench.smoothing``) need only how often
the base classifier predicts each class on noisy copies of an image. This module draws those
samples and counts them; the statistics built on the counts stay in ``certbench.smoothing``.

Engine design (statistics identical to the textbook loop, only faster):
- Noise comes in fixed-size blocks (NOISE_BLOCK samples), each drawn from a generator seeded
  with the 64-bit block seed derive_seed(derive_seed(seed, test set), image index, phase, block).
  Forward batches are cut from the stream of blocks, so the records do not depend on batch size,
  packing of images, or sharding. All 64 bits seed the generator on every device: Philox on
  CUDA, a directly written MT19937 state on CPU (certbench.random_streams has the definition);
  records are reproducible per device type, and CPU and CUDA records differ.
- Samples of several images share a forward batch; class counts are accumulated on the device
  with one index_add per batch and copied to the host once per wave of images.
- Noise and x+δ are fp32; only the model's forward runs under optional bf16 autocast.
- Early abstention: every CHECK_EVERY batches a stop rule (:func:`early_abstain_rule`) reads the
  counts and stops drawing estimation samples of images whose bound provably stays below 1/2.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from certbench.errors import CertificationError
from certbench.random_streams import block_generator, derive_seed, derive_seeds, normal_blocks

NOISE_BLOCK = 500
"""Samples per independently seeded noise block; part of the random-stream definition."""

SELECT, ESTIMATE, PREDICT = 0, 1, 2
"""Phase keys of the random streams: selection and estimation samples never share noise."""

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    sigma: float
    batch_size: int
    device: torch.device
    amp: torch.dtype | None
    channels_last: bool
    pad_batches: bool
    base_seed: int


@dataclass(slots=True)
class _Piece:
    slot: int
    phase_slot: int
    noise: torch.Tensor


def sampling_settings(
    model: nn.Module,
    sigma: float,
    batch_size: int,
    seed: int,
    test_set: str,
    device: torch.device | str | None,
    amp: str | None,
    channels_last: bool,
    compile: bool,
) -> SamplingSettings:
    if amp is not None and amp not in AMP_DTYPES:
        raise CertificationError(f"amp must be one of {sorted(AMP_DTYPES)} or None, got {amp!r}")
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    return SamplingSettings(
        sigma=float(sigma),
        batch_size=batch_size,
        device=torch.device(device),
        amp=AMP_DTYPES[amp] if amp else None,
        channels_last=channels_last,
        pad_batches=compile,
        base_seed=derive_seed(seed, test_set),
    )


def prepare_model(model: nn.Module, settings: SamplingSettings, compile: bool) -> nn.Module:
    model.eval().to(settings.device)
    if settings.channels_last:
        model.to(memory_format=torch.channels_last)
    if not compile:
        return model
    if model not in _COMPILED:
        # freezing treats the weights as constants: BatchNorm folds into the convolutions and
        # the weights are pre-packed; valid because the base classifier is fixed while certifying
        compiled = torch.compile(model, dynamic=False, options={"freezing": True})
        _COMPILED[model] = cast(nn.Module, compiled)
    return _COMPILED[model]


_COMPILED: weakref.WeakKeyDictionary[nn.Module, nn.Module] = weakref.WeakKeyDictionary()
"""One compiled graph per model, reused by every certify call (shards, test sets)."""


def waves(count: int, samples_per_image: int, batch_size: int) -> Iterator[slice]:
    """Groups of images whose samples fill a few batches: one host sync per group."""
    per_wave = max(1, min(256, -(-4 * batch_size // samples_per_image)))
    for start in range(0, count, per_wave):
        yield slice(start, min(count, start + per_wave))


StopRule = Callable[[np.ndarray], np.ndarray]


def early_abstain_rule(n: int, threshold: int) -> StopRule:
    """Slots whose estimation count of ĉ_A can no longer reach the certification threshold."""

    def stop(counts: np.ndarray) -> np.ndarray:
        selected = counts[:, 0].argmax(axis=1)
        n_a = counts[np.arange(len(counts)), 1, selected]
        remaining = n - counts[:, 1].sum(axis=1)
        return (counts[:, 0].sum(axis=1) > 0) & (n_a + remaining < threshold)

    return stop


CHECK_EVERY = 16
"""Batches between host syncs for the early-abstain rule."""


def count_wave(
    forward: nn.Module,
    images: torch.Tensor,
    indices: np.ndarray,
    phases: tuple[tuple[int, int], ...],
    settings: SamplingSettings,
    stop: StopRule | None,
    bar: tqdm | _NullBar,
) -> tuple[np.ndarray, np.ndarray]:
    """Class counts (images, phases + 1, classes) and seconds per image for one wave.

    The extra phase row carries the early-abstain flag in column 0.
    """
    started = time.perf_counter()
    x = images.to(settings.device, non_blocking=True)
    stopped = np.zeros(len(x), dtype=bool)
    drawn = np.zeros(len(x), dtype=np.int64)
    counts: torch.Tensor | None = None
    pieces = _noise_pieces(x.shape[1:], indices, phases, settings, stopped)
    for step, batch in enumerate(_batches(pieces, settings.batch_size)):
        predictions, slots, classes = _classify(forward, x, batch, settings)
        if counts is None:
            counts = torch.zeros(
                (len(x) * len(phases), classes), dtype=torch.int64, device=settings.device
            )
        # index_add_ rather than bincount: CUDA's bincount reads the maximum back to the host
        # (a sync per batch); integer adds are exact in any order, so this stays deterministic
        counts.view(-1).index_add_(0, slots * classes + predictions, torch.ones_like(predictions))
        for piece in batch:
            drawn[piece.slot] += len(piece.noise)
        bar.update(sum(len(piece.noise) for piece in batch))
        if stop is not None and step % CHECK_EVERY == CHECK_EVERY - 1:
            stopped |= stop(_host_counts(counts, len(x), len(phases)))
    host = _host_counts(counts, len(x), len(phases))
    if stop is not None:
        stopped |= stop(host)
    flags = np.zeros((len(x), 1, host.shape[2]), dtype=np.int64)
    flags[:, 0, 0] = stopped & (host[:, -1].sum(axis=1) < phases[-1][1])
    elapsed = time.perf_counter() - started
    seconds = (elapsed * drawn / max(1, int(drawn.sum()))).tolist()
    return np.concatenate([host, flags], axis=1), seconds


def _noise_pieces(
    shape: torch.Size,
    indices: np.ndarray,
    phases: tuple[tuple[int, int], ...],
    settings: SamplingSettings,
    stopped: np.ndarray,
) -> Iterator[_Piece]:
    """Noise blocks image by image, phase by phase; skips images the stop rule has settled."""
    generator = block_generator(settings.device)
    for slot, index in enumerate(indices):
        for phase_slot, (phase, count) in enumerate(phases):
            sizes = [min(NOISE_BLOCK, count - start) for start in range(0, count, NOISE_BLOCK)]
            seeds = noise_block_seeds(settings.base_seed, int(index), phase, count)
            blocks = normal_blocks(seeds, sizes, shape, settings.device, generator)
            for _ in sizes:
                if stopped[slot] and phase == ESTIMATE:
                    break  # checked before the next block is drawn
                yield _Piece(slot, slot * len(phases) + phase_slot, next(blocks))


def noise_block_seeds(base_seed: int, index: int, phase: int, count: int) -> list[int]:
    """64-bit seeds of the noise blocks of `count` samples of one image in one phase.

    `base_seed` is ``derive_seed(seed, test_set)``; block b holds samples
    [b·NOISE_BLOCK, (b+1)·NOISE_BLOCK) and is ``normal_blocks`` of its seed.
    """
    blocks = np.arange(-(-count // NOISE_BLOCK), dtype=np.uint64)
    return derive_seeds(base_seed, index, phase, last=blocks).tolist()


def _batches(pieces: Iterator[_Piece], batch_size: int) -> Iterator[list[_Piece]]:
    """Cut the noise-block stream into batches of exactly batch_size samples (last may be short)."""
    batch: list[_Piece] = []
    filled = 0
    for piece in pieces:
        while len(piece.noise):
            take = min(batch_size - filled, len(piece.noise))
            batch.append(_Piece(piece.slot, piece.phase_slot, piece.noise[:take]))
            piece = _Piece(piece.slot, piece.phase_slot, piece.noise[take:])
            filled += take
            if filled == batch_size:
                yield batch
                batch, filled = [], 0
    if batch:
        yield batch


def _classify(
    forward: nn.Module, x: torch.Tensor, batch: list[_Piece], settings: SamplingSettings
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Top-1 class of f(x + σ·noise) per sample, its (image, phase) slot, and the class count.

    Everything is built on the device (broadcast adds, fills): no host-to-device copy, which on
    CUDA would wait for the previous batch and stall the pipeline.
    """
    device = settings.device
    noisy = torch.cat([x[p.slot] + settings.sigma * p.noise for p in batch])
    slots = torch.cat(
        [torch.full((len(p.noise),), p.phase_slot, dtype=torch.int64, device=device) for p in batch]
    )
    real = len(noisy)
    if settings.pad_batches and real < settings.batch_size:
        noisy = torch.cat([noisy, noisy.new_zeros((settings.batch_size - real, *noisy.shape[1:]))])
    if settings.channels_last:
        noisy = noisy.contiguous(memory_format=torch.channels_last)
    with (
        torch.inference_mode(),
        torch.autocast(
            device.type, dtype=settings.amp or torch.float32, enabled=bool(settings.amp)
        ),
    ):
        logits = forward(noisy)
    if logits.dim() != 2 or len(logits) != len(noisy) or logits.shape[1] < 2:
        raise CertificationError(
            f"model must return logits of shape (batch, classes >= 2), got {tuple(logits.shape)}"
        )
    return logits[:real].argmax(dim=1), slots, int(logits.shape[1])


def _host_counts(counts: torch.Tensor | None, images: int, phases: int) -> np.ndarray:
    if counts is None:
        raise CertificationError("no samples were drawn")
    return counts.view(images, phases, -1).cpu().numpy()


def images_rate(done: int, total: int, started: float) -> str:
    rate = done / max(time.perf_counter() - started, 1e-9)
    return f"images {done}/{total}, {rate:.2f} img/s"


class _NullBar:
    def update(self, _: int) -> None:
        return None

    def set_postfix_str(self, _: str) -> None:
        return None

    def __enter__(self) -> _NullBar:
        return self

    def __exit__(self, *_: object) -> None:
        return None


def progress_bar(total: int, enabled: bool) -> tqdm | _NullBar:
    if not enabled:
        return _NullBar()
    return tqdm(total=total, unit="sample", unit_scale=True, desc="certify", dynamic_ncols=True)
