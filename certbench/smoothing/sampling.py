"""The sampling engine of randomized smoothing: class counts of f(x + ε), ε ~ N(0, σ²I), fast.

CERTIFY and PREDICT (Cohen, Rosenfeld & Kolter 2019; ``certbench.smoothing.core``) need only how
often the base classifier predicts each class on noisy copies of an image. This module draws those
samples and counts them; the statistics built on the counts stay in ``certbench.smoothing.core``.

Engine design (statistics identical to the textbook loop, only faster):
- Noise comes in fixed-size blocks (NOISE_BLOCK samples), each drawn from a generator seeded
  with the 64-bit block seed derive_seed(derive_seed(seed, test set), image index, phase, block).
  Forward batches are cut from the stream of blocks, so the records do not depend on batch size,
  packing of images, or sharding. All 64 bits seed the generator on every device: Philox on
  CUDA, a directly written MT19937 state on CPU (certbench.smoothing.streams has the definition);
  records are reproducible per device type, and CPU and CUDA records differ.
- Samples of several images share a forward batch; class counts are accumulated on the device
  with one index_add per batch and copied to the host once per wave of images.
- Noise and x+δ are fp32; only the model's forward runs under optional bf16 autocast.
- Counts do not depend on the batch size or sharding, bit for bit: noise is fixed per sample
  (above), a sample whose top two logits nearly tie (:func:`certbench.nets.near_ties`) is not
  counted from its batch but re-drawn from its block seed and classified by the eager model at
  its own slot of a fixed-shape chunk (:class:`certbench.nets.RowSlots`), whose kernels do not
  depend on the batch. Every other sample's argmax is the same whatever kernel computed it. The
  near ties are kept on the device (sample codes in a buffer) and settled where the host reads
  the counts anyway (end of a wave, early-abstain checks): no extra sync in the hot loop.
- Early abstention: every CHECK_EVERY batches a stop rule (:func:`early_abstain_rule`) reads the
  counts and stops drawing estimation samples of images whose bound provably stays below 1/2.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from certbench.errors import CertificationError
from certbench.nets import RowSlots, chunk_rows, fold_batchnorm, near_ties, packed_keys
from certbench.smoothing.compiled import compiled_forward, is_compiled
from certbench.smoothing.defaults import AUTO, engine_choice
from certbench.smoothing.streams import block_generator, derive_seed, derive_seeds, normal_blocks

NOISE_BLOCK = 500
"""Samples per independently seeded noise block; part of the random-stream definition."""

SELECT, ESTIMATE, PREDICT = 0, 1, 2
"""Phase keys of the random streams: selection and estimation samples never share noise."""

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

TIE_RTOL = {"fp32": 1e-3, "tf32": 1e-2, "amp": 5e-2}
"""Near-tie tolerance of the top two logits (relative to the largest magnitude, at least 1) by
the forward's arithmetic. fp32 kernels move logits by ~1e-6 relative between batch shapes; TF32
convolutions (cuDNN's default) round inputs to 10 mantissa bits, ~1e-3; bf16/fp16 activations
round every layer to 8/11 bits, ~1e-2 on the logits of a deep net. Part of what makes counts
batch-invariant: a margin above the tolerance cannot flip between kernel paths."""


def tie_rtol(device: torch.device, amp: torch.dtype | None) -> float:
    """The near-tie tolerance for a forward on `device` under `amp`."""
    if amp is not None:
        return TIE_RTOL["amp"]
    if device.type == "cuda" and torch.backends.cudnn.allow_tf32:
        return TIE_RTOL["tf32"]
    return TIE_RTOL["fp32"]


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    sigma: float
    batch_size: int
    device: torch.device
    amp: torch.dtype | None
    channels_last: bool
    pad_batches: bool
    base_seed: int
    compile: bool = False
    compile_requested: bool = False
    """The caller asked for compile (``compile=True``): a model torch.compile cannot compile is
    then an error, not an eager fallback (``certbench.smoothing.compiled``)."""


@dataclass(frozen=True, slots=True)
class Classifier:
    """The base classifier as the engine runs it: ``batch`` (possibly compiled) for the forward
    batches, ``canonical`` (eager, same weights and layout) for near ties in fixed-shape chunks."""

    batch: nn.Module
    canonical: nn.Module


@dataclass(slots=True)
class _Piece:
    slot: int
    phase_slot: int
    noise: torch.Tensor
    start: int = 0
    """Index of the piece's first sample within its (image, phase) stream."""


def sampling_settings(
    model: nn.Module,
    sigma: float,
    batch_size: int | None,
    seed: int,
    test_set: str,
    device: torch.device | str | None,
    amp: str | None,
    channels_last: bool,
    compile: bool | None,
    samples: int = 0,
) -> SamplingSettings:
    """The settings of one call; ``None`` batch size/compile and ``amp="auto"`` take the
    device's defaults for a run of `samples` noisy samples (:func:`engine_choice`)."""
    if amp is not None and amp != AUTO and amp not in AMP_DTYPES:
        raise CertificationError(
            f"amp must be one of {sorted(AMP_DTYPES)}, 'auto' or None, got {amp!r}"
        )
    if batch_size is not None and batch_size < 1:
        raise CertificationError(f"batch_size must be >= 1, got {batch_size}")
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    device = torch.device(device)
    choice = engine_choice(
        device, samples, batch_size=batch_size, amp=amp, compile=compile,
        compiled_already=is_compiled(model),
    )  # fmt: skip
    return SamplingSettings(
        sigma=float(sigma),
        batch_size=choice.batch_size,
        device=device,
        amp=AMP_DTYPES[choice.amp] if choice.amp else None,
        channels_last=channels_last,
        pad_batches=choice.compile,
        base_seed=derive_seed(seed, test_set),
        compile=choice.compile,
        compile_requested=compile is True,
    )


def prepare_model(model: nn.Module, settings: SamplingSettings) -> Classifier:
    """The classifier the engine runs: eval mode on the device, BatchNorm folded into the
    convolutions (eager path), channels-last if asked, and compiled if asked (falling back to
    the eager forward where torch.compile fails: ``certbench.smoothing.compiled``).

    Folded and compiled graphs are cached per model and rebuilt when a weight changed in place
    since (an optimizer step between two certifications of a model in training)."""
    model.eval().to(settings.device)
    if settings.channels_last:
        model.to(memory_format=torch.channels_last)
    version = _weights_version(model)
    cached = _FOLDED.get(model)
    if cached is None or cached[0] != version:
        folded = fold_batchnorm(model)
        if settings.channels_last:
            folded.to(memory_format=torch.channels_last)
        cached = (version, folded)
        _FOLDED[model] = cached
    eager = cached[1]
    if not settings.compile:
        return Classifier(eager, eager)
    forward = compiled_forward(model, eager, version, requested=settings.compile_requested)
    return Classifier(forward, eager)


def _weights_version(model: nn.Module) -> tuple[tuple[int, int, int], ...]:
    """Identity and in-place version counter of every parameter and buffer (cheap to read)."""
    return tuple(
        (t.data_ptr(), t._version, t.device.index or 0)
        for t in (*model.parameters(), *model.buffers())
    )


_FOLDED: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, nn.Module]] = weakref.WeakKeyDictionary()
"""One BatchNorm-folded copy per model (the eager forward and the near-tie evaluations)."""


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
    classifier: Classifier,
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
    ties = _NearTies(classifier.canonical, x, indices, phases, settings)
    counts = _draw_and_count(
        classifier.batch, x, indices, phases, settings, stop, bar, ties, stopped, drawn
    )
    ties.settle(counts)
    host = _host_counts(counts, len(x), len(phases))
    if stop is not None:
        stopped |= stop(host)
    flags = np.zeros((len(x), 1, host.shape[2]), dtype=np.int64)
    flags[:, 0, 0] = stopped & (host[:, -1].sum(axis=1) < phases[-1][1])
    elapsed = time.perf_counter() - started
    seconds = (elapsed * drawn / max(1, int(drawn.sum()))).tolist()
    return np.concatenate([host, flags], axis=1), seconds


def _draw_and_count(
    forward: nn.Module,
    x: torch.Tensor,
    indices: np.ndarray,
    phases: tuple[tuple[int, int], ...],
    settings: SamplingSettings,
    stop: StopRule | None,
    bar: tqdm | _NullBar,
    ties: _NearTies,
    stopped: np.ndarray,
    drawn: np.ndarray,
) -> torch.Tensor:
    """The hot loop: draw, classify and count every batch of the wave, on the device.

    Without a stop rule nothing here reads the device back to the host (the CUDA tests run it
    under ``torch.cuda.set_sync_debug_mode("error")``); with one, every CHECK_EVERY batches."""
    counts: torch.Tensor | None = None
    pieces = _noise_pieces(x.shape[1:], indices, phases, settings, stopped)
    for step, batch in enumerate(_batches(pieces, settings.batch_size)):
        predictions, slots, classes, near = _classify(forward, x, batch, settings)
        if counts is None:
            counts = torch.zeros(
                (len(x) * len(phases), classes), dtype=torch.int64, device=settings.device
            )
        # index_add_ rather than bincount: CUDA's bincount reads the maximum back to the host
        # (a sync per batch); integer adds are exact in any order, so this stays deterministic.
        # Near ties add 0 here and are counted when settled.
        counts.view(-1).index_add_(0, slots * classes + predictions, (~near).long())
        ties.keep(batch, near)
        for piece in batch:
            drawn[piece.slot] += len(piece.noise)
        bar.update(sum(len(piece.noise) for piece in batch))
        if stop is not None and step % CHECK_EVERY == CHECK_EVERY - 1:
            ties.settle(counts)
            stopped |= stop(_host_counts(counts, len(x), len(phases)))
    if counts is None:
        raise CertificationError("no samples were drawn")
    return counts


class _NearTies:
    """Samples of one wave whose top two logits nearly tie, kept as codes on the device and
    settled canonically where the host reads the counts anyway.

    A sample's code is ``phase_slot · stride + j`` (j: its index in its image's phase stream),
    written at the buffer's fill position with a scatter (positions from a cumulative sum), so
    keeping them never syncs. The buffer holds every sample of the wave: it cannot overflow.
    Settling re-draws each sample's noise from its block seed, adds it to its image exactly as
    the batch did, and classifies it with the eager model at slot ``j mod rows`` of fixed-shape
    chunks (:func:`certbench.nets.packed_keys`), so the class does not depend on the batch.
    """

    def __init__(
        self,
        model: nn.Module,
        x: torch.Tensor,
        indices: np.ndarray,
        phases: tuple[tuple[int, int], ...],
        settings: SamplingSettings,
    ) -> None:
        self.model, self.x, self.indices, self.phases, self.settings = (
            model, x, indices, phases, settings,
        )  # fmt: skip
        self.stride = max(count for _, count in phases)
        capacity = len(x) * sum(count for _, count in phases)
        device = settings.device
        self.codes = torch.zeros(capacity + 1, dtype=torch.int64, device=device)  # +1: discard
        self.filled = torch.zeros(1, dtype=torch.int64, device=device)
        self.capacity = capacity

    def keep(self, batch: list[_Piece], near: torch.Tensor) -> None:
        device = self.settings.device
        codes = torch.cat(
            [
                torch.arange(p.start, p.start + len(p.noise), device=device)
                + p.phase_slot * self.stride
                for p in batch
            ]
        )
        at = self.filled + torch.cumsum(near.long(), 0) - 1
        at = torch.where(near, at, torch.full_like(at, self.capacity))
        self.codes.scatter_(0, at, codes)
        self.filled += near.long().sum()

    def settle(self, counts: torch.Tensor) -> None:
        """Classify the kept samples canonically, add them to `counts`, and empty the buffer."""
        filled = int(self.filled.item())  # the host reads the counts right after: no extra wait
        if not filled:
            return
        codes = self.codes[:filled].cpu().numpy()
        self.filled.zero_()
        noisy = self._redraw(codes)
        rows = chunk_rows(self.settings.device)
        positions = torch.from_numpy(codes % self.stride % rows)
        slots = RowSlots(packed_keys(positions, rows), rows)
        settings = self.settings

        def forward(chunk: torch.Tensor) -> torch.Tensor:
            if settings.channels_last:
                chunk = chunk.contiguous(memory_format=torch.channels_last)
            return self.model(chunk).float()

        with (
            torch.inference_mode(),
            torch.autocast(
                settings.device.type,
                dtype=settings.amp or torch.float32,
                enabled=bool(settings.amp),
            ),
        ):
            classes = slots.apply(forward, noisy).argmax(dim=1)
        phase_slot = torch.from_numpy(codes // self.stride).to(settings.device)
        width = counts.shape[1]
        counts.view(-1).index_add_(0, phase_slot * width + classes, torch.ones_like(classes))

    def _redraw(self, codes: np.ndarray) -> torch.Tensor:
        """x + σ·noise of the coded samples, from their blocks' seeds (same values as the batch)."""
        phase_slot, j = codes // self.stride, codes % self.stride
        rows = []
        for code_slot, block in sorted(
            {(int(p), int(b)) for p, b in zip(phase_slot, j // NOISE_BLOCK, strict=True)}
        ):
            slot, phase_i = divmod(code_slot, len(self.phases))
            phase, count = self.phases[phase_i]
            seed = derive_seeds(
                self.settings.base_seed, int(self.indices[slot]), phase,
                last=np.array([block], dtype=np.uint64),
            )  # fmt: skip
            size = min(NOISE_BLOCK, count - block * NOISE_BLOCK)
            noise = next(
                normal_blocks([int(seed[0])], [size], self.x.shape[1:], self.settings.device)
            )
            members = np.nonzero((phase_slot == code_slot) & (j // NOISE_BLOCK == block))[0]
            offsets = torch.from_numpy(j[members] % NOISE_BLOCK).to(self.settings.device)
            rows.append(
                (members, self.x[slot] + self.settings.sigma * noise.index_select(0, offsets))
            )
        order = np.concatenate([m for m, _ in rows])
        noisy = torch.cat([r for _, r in rows])
        return noisy.index_select(0, torch.from_numpy(np.argsort(order)).to(noisy.device))


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
            for block in range(len(sizes)):
                if stopped[slot] and phase == ESTIMATE:
                    break  # checked before the next block is drawn
                start = NOISE_BLOCK * block
                yield _Piece(slot, slot * len(phases) + phase_slot, next(blocks), start)


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
            batch.append(_Piece(piece.slot, piece.phase_slot, piece.noise[:take], piece.start))
            piece = _Piece(piece.slot, piece.phase_slot, piece.noise[take:], piece.start + take)
            filled += take
            if filled == batch_size:
                yield batch
                batch, filled = [], 0
    if batch:
        yield batch


def _classify(
    forward: nn.Module, x: torch.Tensor, batch: list[_Piece], settings: SamplingSettings
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Top-1 class of f(x + σ·noise) per sample, its (image, phase) slot, the class count, and
    which samples are near ties (:func:`tie_rtol`).

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
    logits = logits[:real]
    near = near_ties(logits, tie_rtol(device, settings.amp))
    return logits.argmax(dim=1), slots, int(logits.shape[1]), near


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
