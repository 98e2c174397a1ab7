"""Randomized smoothing (Cohen, Rosenfeld & Kolter 2019): CERTIFY and PREDICT.

The smoothed classifier g(x) = argmax_c P(f(x + ε) = c), ε ~ N(0, σ²I), is robust within the ℓ2
radius σ·Φ⁻¹(p̲_A) whenever the lower confidence bound p̲_A on the top-class probability exceeds
1/2. CERTIFY selects ĉ_A from n0 noisy samples, estimates p̲_A from n *fresh* samples with the
one-sided Clopper-Pearson bound at level 1−α, and abstains below 1/2. PREDICT returns the top
class only if a two-sided binomial test separates it from the runner-up at level α.

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
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

import numpy as np
import torch
from scipy.stats import beta, binomtest, norm
from torch import nn
from tqdm.auto import tqdm

from certbench.errors import CertificationError
from certbench.random_streams import block_generator, derive_seed, derive_seeds, normal_blocks

__all__ = [
    "ABSTAIN",
    "NOISE_BLOCK",
    "CertifyRecord",
    "PredictRecord",
    "certified_radius",
    "certify",
    "derive_seed",
    "lower_confidence_bound",
    "min_count_to_certify",
    "noise_block_seeds",
    "predict",
]

ABSTAIN = -1
"""Prediction value of an abstention (radius 0)."""

NOISE_BLOCK = 500
"""Samples per independently seeded noise block; part of the random-stream definition."""

SELECT, ESTIMATE, PREDICT = 0, 1, 2
"""Phase keys of the random streams: selection and estimation samples never share noise."""

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True, slots=True)
class CertifyRecord:
    """Outcome of CERTIFY on one image; counts are kept so metrics can be recomputed at any α."""

    index: int
    label: int
    prediction: int
    radius: float
    pa_lower: float
    selected: int
    n_a: int
    n_y: int
    n: int
    n0: int
    correct: bool
    seconds: float
    sigma: float
    alpha: float
    early_abstain: bool = False


@dataclass(frozen=True, slots=True)
class PredictRecord:
    """Outcome of PREDICT on one image."""

    index: int
    label: int
    prediction: int
    count1: int
    count2: int
    p_value: float
    n: int
    correct: bool
    seconds: float
    sigma: float
    alpha: float


def lower_confidence_bound(n_a: int, n: int, alpha: float) -> float:
    """One-sided (1−α) Clopper-Pearson lower bound on p_A: the α quantile of Beta(n_a, n−n_a+1)."""
    if n_a <= 0:
        return 0.0
    return float(beta.ppf(alpha, n_a, n - n_a + 1))


def certified_radius(pa_lower: float, sigma: float) -> float:
    """σ·Φ⁻¹(p̲_A), or 0 when the bound does not exceed 1/2 (abstain)."""
    return float(sigma * norm.ppf(pa_lower)) if pa_lower >= 0.5 else 0.0


@lru_cache(maxsize=256)
def min_count_to_certify(n: int, alpha: float) -> int:
    """Smallest n_A whose lower bound reaches 1/2 (n+1 if none): the early-abstain threshold."""
    lo, hi = 0, n + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if mid <= n and lower_confidence_bound(mid, n, alpha) >= 0.5:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True, slots=True)
class _Settings:
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


def certify(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    sigma: float,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    seed: int = 0,
    device: torch.device | str | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    test_set: str = "",
    amp: str | None = None,
    channels_last: bool = True,
    compile: bool = False,
    early_abstain: bool = False,
    progress: bool = False,
    on_record: Callable[[CertifyRecord], None] | None = None,
    check_range: bool = True,
) -> list[CertifyRecord]:
    """Cohen et al.'s CERTIFY for each image: one record per image, in input order.

    Args:
        model: maps a float batch (N,C,H,W) in [0,1] to logits; it is put in eval mode (a
            deterministic base classifier is what the guarantee is about) and moved to `device`.
        images: float tensor (N,C,H,W) in [0,1]; noise is added in this pixel space, unclamped.
        labels: true classes (N,).
        indices: global image indices (default 0..N-1); with `seed` and `test_set` they define each
            image's random stream, so any sharding of a test set gives identical records.
        early_abstain: stop drawing estimation samples once the bound provably stays below 1/2;
            such records hold the samples actually drawn in `n` and are flagged.
        on_record: called as each record is final (progress, heartbeats, cancellation).
        check_range: refuse images outside [0, 1] (a dataset-scaling mistake). Callers that
            certify deliberately perturbed inputs pass False: Fourier-basis perturbations
            (``certbench.fourier_sensitivity``) leave the box, unclipped as in the papers' code.

    Raises:
        CertificationError: inconsistent shapes, labels, or protocol parameters.
    """
    _check_protocol(sigma=sigma, n=n, alpha=alpha, n0=n0, batch_size=batch_size)
    settings = _settings(
        model, sigma, batch_size, seed, test_set, device, amp, channels_last, compile
    )
    x, y, idx = _check_inputs(images, labels, indices, check_range=check_range)
    forward = _prepare_model(model, settings, compile)
    phases = ((SELECT, n0), (ESTIMATE, n))
    threshold = min_count_to_certify(n, alpha) if early_abstain else None
    records: list[CertifyRecord] = []
    started = time.perf_counter()
    with _progress_bar(len(x) * (n0 + n), progress) as bar:
        for wave in _waves(len(x), n0 + n, batch_size):
            stop = None if threshold is None else _early_abstain_rule(n, threshold)
            counts, seconds = _count_wave(forward, x[wave], idx[wave], phases, settings, stop, bar)
            _check_labels(y[wave], counts.shape[2])
            for j, i in enumerate(range(wave.start, wave.stop)):
                record = _certify_record(
                    int(idx[i]), int(y[i]), counts[j], seconds[j], sigma, alpha
                )
                records.append(record)
                if on_record is not None:
                    on_record(record)
            bar.set_postfix_str(_images_rate(len(records), len(x), started))
    return records


def predict(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    sigma: float,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int = 1000,
    seed: int = 0,
    device: torch.device | str | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    test_set: str = "",
    amp: str | None = None,
    channels_last: bool = True,
    compile: bool = False,
    progress: bool = False,
) -> list[PredictRecord]:
    """Cohen et al.'s PREDICT: top class if `binomtest(c1, c1+c2, 0.5)` rejects at level α."""
    _check_protocol(sigma=sigma, n=n, alpha=alpha, n0=1, batch_size=batch_size)
    settings = _settings(
        model, sigma, batch_size, seed, test_set, device, amp, channels_last, compile
    )
    x, y, idx = _check_inputs(images, labels, indices)
    forward = _prepare_model(model, settings, compile)
    records: list[PredictRecord] = []
    with _progress_bar(len(x) * n, progress) as bar:
        for wave in _waves(len(x), n, batch_size):
            counts, seconds = _count_wave(
                forward, x[wave], idx[wave], ((PREDICT, n),), settings, None, bar
            )
            _check_labels(y[wave], counts.shape[2])
            for j, i in enumerate(range(wave.start, wave.stop)):
                records.append(
                    _predict_record(
                        int(idx[i]), int(y[i]), counts[j, 0], seconds[j], sigma, alpha, n
                    )
                )
    return records


def _check_labels(labels: np.ndarray, classes: int) -> None:
    if (labels >= classes).any():
        raise CertificationError(
            f"label {int(labels.max())} is out of range for a model with {classes} outputs"
        )


def _certify_record(
    index: int, label: int, counts: np.ndarray, seconds: float, sigma: float, alpha: float
) -> CertifyRecord:
    selection, estimation = counts[0], counts[1]
    selected = int(np.argmax(selection))
    n_drawn = int(estimation.sum())
    n0 = int(selection.sum())
    n_a, n_y = int(estimation[selected]), int(estimation[label])
    pa_lower = lower_confidence_bound(n_a, n_drawn, alpha)
    prediction = selected if pa_lower >= 0.5 else ABSTAIN
    return CertifyRecord(
        index=index,
        label=label,
        prediction=prediction,
        radius=certified_radius(pa_lower, sigma),
        pa_lower=pa_lower,
        selected=selected,
        n_a=n_a,
        n_y=n_y,
        n=n_drawn,
        n0=n0,
        correct=prediction == label,
        seconds=seconds,
        sigma=sigma,
        alpha=alpha,
        early_abstain=bool(counts[2, 0]),
    )


def _predict_record(
    index: int, label: int, counts: np.ndarray, seconds: float, sigma: float, alpha: float, n: int
) -> PredictRecord:
    order = np.argsort(-counts, kind="stable")
    count1, count2 = int(counts[order[0]]), int(counts[order[1]]) if len(counts) > 1 else 0
    p_value = float(binomtest(count1, count1 + count2, 0.5).pvalue)
    prediction = int(order[0]) if p_value <= alpha else ABSTAIN
    return PredictRecord(
        index=index,
        label=label,
        prediction=prediction,
        count1=count1,
        count2=count2,
        p_value=p_value,
        n=n,
        correct=prediction == label,
        seconds=seconds,
        sigma=sigma,
        alpha=alpha,
    )


def _check_protocol(*, sigma: float, n: int, alpha: float, n0: int, batch_size: int) -> None:
    if not sigma > 0:
        raise CertificationError(f"sigma must be > 0, got {sigma}")
    if n < 1 or n0 < 1:
        raise CertificationError(f"n and n0 must be >= 1, got n={n}, n0={n0}")
    if not 0 < alpha < 1:
        raise CertificationError(f"alpha must lie in (0, 1), got {alpha}")
    if batch_size < 1:
        raise CertificationError(f"batch_size must be >= 1, got {batch_size}")


def _check_inputs(
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    indices: torch.Tensor | Sequence[int] | None,
    *,
    check_range: bool = True,
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        raise CertificationError("images must be a float tensor of shape (N, C, H, W)")
    if not images.is_floating_point():
        raise CertificationError(
            f"images must be float in [0, 1], got dtype {images.dtype}; divide uint8 images by 255"
        )
    if not bool(torch.isfinite(images).all()):
        raise CertificationError("images contain NaN or inf values")
    if check_range and images.numel():
        lo, hi = float(images.min()), float(images.max())
        if lo < 0.0 or hi > 1.0:
            raise CertificationError(
                f"images must lie in [0, 1], found values in [{lo:.4g}, {hi:.4g}]"
            )
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels, dtype=np.int64)
    if y.shape != (len(images),):
        raise CertificationError(f"labels must have shape ({len(images)},), got {y.shape}")
    if (y < 0).any():
        raise CertificationError("labels must be non-negative class indices")
    idx = np.arange(len(images)) if indices is None else np.asarray(indices, dtype=np.int64)
    if idx.shape != (len(images),) or (idx < 0).any() or len(np.unique(idx)) != len(idx):
        raise CertificationError("indices must be N distinct non-negative integers")
    return images.float(), y, idx


def _settings(
    model: nn.Module,
    sigma: float,
    batch_size: int,
    seed: int,
    test_set: str,
    device: torch.device | str | None,
    amp: str | None,
    channels_last: bool,
    compile: bool,
) -> _Settings:
    if amp is not None and amp not in AMP_DTYPES:
        raise CertificationError(f"amp must be one of {sorted(AMP_DTYPES)} or None, got {amp!r}")
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    return _Settings(
        sigma=float(sigma),
        batch_size=batch_size,
        device=torch.device(device),
        amp=AMP_DTYPES[amp] if amp else None,
        channels_last=channels_last,
        pad_batches=compile,
        base_seed=derive_seed(seed, test_set),
    )


def _prepare_model(model: nn.Module, settings: _Settings, compile: bool) -> nn.Module:
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


def _waves(count: int, samples_per_image: int, batch_size: int) -> Iterator[slice]:
    """Groups of images whose samples fill a few batches: one host sync per group."""
    per_wave = max(1, min(256, -(-4 * batch_size // samples_per_image)))
    for start in range(0, count, per_wave):
        yield slice(start, min(count, start + per_wave))


StopRule = Callable[[np.ndarray], np.ndarray]


def _early_abstain_rule(n: int, threshold: int) -> StopRule:
    """Slots whose estimation count of ĉ_A can no longer reach the certification threshold."""

    def stop(counts: np.ndarray) -> np.ndarray:
        selected = counts[:, 0].argmax(axis=1)
        n_a = counts[np.arange(len(counts)), 1, selected]
        remaining = n - counts[:, 1].sum(axis=1)
        return (counts[:, 0].sum(axis=1) > 0) & (n_a + remaining < threshold)

    return stop


CHECK_EVERY = 16
"""Batches between host syncs for the early-abstain rule."""


def _count_wave(
    forward: nn.Module,
    images: torch.Tensor,
    indices: np.ndarray,
    phases: tuple[tuple[int, int], ...],
    settings: _Settings,
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
    settings: _Settings,
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
    forward: nn.Module, x: torch.Tensor, batch: list[_Piece], settings: _Settings
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


def _images_rate(done: int, total: int, started: float) -> str:
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


def _progress_bar(total: int, enabled: bool) -> tqdm | _NullBar:
    if not enabled:
        return _NullBar()
    return tqdm(total=total, unit="sample", unit_scale=True, desc="certify", dynamic_ncols=True)
