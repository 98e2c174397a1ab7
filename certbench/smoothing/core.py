"""Randomized smoothing (Cohen, Rosenfeld & Kolter 2019): CERTIFY and PREDICT.

The smoothed classifier g(x) = argmax_c P(f(x + ε) = c), ε ~ N(0, σ²I), is robust within the ℓ2
radius σ·Φ⁻¹(p̲_A) whenever the lower confidence bound p̲_A on the top-class probability exceeds
1/2. CERTIFY selects ĉ_A from n0 noisy samples, estimates p̲_A from n *fresh* samples with the
one-sided Clopper-Pearson bound at level 1−α, and abstains below 1/2. PREDICT returns the top
class only if a two-sided binomial test separates it from the runner-up at level α.

The noisy samples behind both come from ``certbench.smoothing.sampling`` (noise streams, packing of
images into forward batches, early abstention); this module holds the protocols and their
statistics: the binomial test here; the records, the Clopper-Pearson bound and the radius in
``certbench.smoothing.outcomes`` (torch-free, so that reading records never loads torch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from scipy.stats import binomtest
from torch import nn

from certbench.errors import CertificationError
from certbench.smoothing.defaults import AUTO
from certbench.smoothing.outcomes import (
    ABSTAIN,
    CertifyRecord,
    PredictRecord,
    certified_radius,
    lower_confidence_bound,
    min_count_to_certify,
)
from certbench.smoothing.sampling import (
    ESTIMATE,
    PREDICT,
    SELECT,
    count_wave,
    early_abstain_rule,
    images_rate,
    prepare_model,
    progress_bar,
    sampling_settings,
    waves,
)

__all__ = [
    "ABSTAIN",
    "CertifyRecord",
    "PredictRecord",
    "certified_radius",
    "certify",
    "lower_confidence_bound",
    "min_count_to_certify",
    "predict",
]


def certify(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    sigma: float,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    test_set: str = "",
    amp: str | None = AUTO,
    channels_last: bool = True,
    compile: bool | None = None,
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
        batch_size, amp, compile: samples per forward batch, autocast precision ("bf16",
            "fp16", None for fp32) and torch.compile. Left at ``None``/"auto" they take the
            device's measured defaults (``certbench.smoothing.defaults``); the counts do not
            depend on the batch size or on compiling, only ``amp`` changes the arithmetic.
            Where torch.compile fails on the model, a call that left ``compile`` to the engine
            runs eagerly (one ``CompileFallbackWarning``; ``compile_fallback(model)`` says why,
            for the records' metadata); ``compile=True`` then raises CertificationError.
        early_abstain: stop drawing estimation samples once the bound provably stays below 1/2;
            such records hold the samples actually drawn in `n` and are flagged.
        on_record: called as each record is final (progress, heartbeats, cancellation).
        check_range: refuse images outside [0, 1] (a dataset-scaling mistake). Callers that
            certify deliberately perturbed inputs pass False: Fourier-basis perturbations
            (``certbench.fourier.sensitivity``) leave the box, unclipped as in the papers' code.

    Raises:
        CertificationError: inconsistent shapes, labels, or protocol parameters; torch.compile
            failing on the model when ``compile=True`` was asked for.
    """
    _check_protocol(sigma=sigma, n=n, alpha=alpha, n0=n0, batch_size=batch_size)
    x, y, idx = _check_inputs(images, labels, indices, check_range=check_range)
    settings = sampling_settings(
        model, sigma, batch_size, seed, test_set, device, amp, channels_last, compile,
        samples=len(x) * (n0 + n),
    )  # fmt: skip
    classifier = prepare_model(model, settings)
    phases = ((SELECT, n0), (ESTIMATE, n))
    threshold = min_count_to_certify(n, alpha) if early_abstain else None
    records: list[CertifyRecord] = []
    started = time.perf_counter()
    with progress_bar(len(x) * (n0 + n), progress) as bar:
        for wave in waves(len(x), n0 + n, settings.batch_size):
            stop = None if threshold is None else early_abstain_rule(n, threshold)
            counts, seconds = count_wave(
                classifier, x[wave], idx[wave], phases, settings, stop, bar
            )
            _check_labels(y[wave], counts.shape[2])
            for j, i in enumerate(range(wave.start, wave.stop)):
                record = _certify_record(
                    int(idx[i]), int(y[i]), counts[j], seconds[j], sigma, alpha
                )
                records.append(record)
                if on_record is not None:
                    on_record(record)
            bar.set_postfix_str(images_rate(len(records), len(x), started))
    return records


def predict(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    sigma: float,
    n: int = 100_000,
    alpha: float = 0.001,
    batch_size: int | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    test_set: str = "",
    amp: str | None = AUTO,
    channels_last: bool = True,
    compile: bool | None = None,
    progress: bool = False,
) -> list[PredictRecord]:
    """Cohen et al.'s PREDICT: top class if `binomtest(c1, c1+c2, 0.5)` rejects at level α."""
    _check_protocol(sigma=sigma, n=n, alpha=alpha, n0=1, batch_size=batch_size)
    x, y, idx = _check_inputs(images, labels, indices)
    settings = sampling_settings(
        model, sigma, batch_size, seed, test_set, device, amp, channels_last, compile,
        samples=len(x) * n,
    )  # fmt: skip
    classifier = prepare_model(model, settings)
    records: list[PredictRecord] = []
    with progress_bar(len(x) * n, progress) as bar:
        for wave in waves(len(x), n, settings.batch_size):
            counts, seconds = count_wave(
                classifier, x[wave], idx[wave], ((PREDICT, n),), settings, None, bar
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


def _check_protocol(*, sigma: float, n: int, alpha: float, n0: int, batch_size: int | None) -> None:
    if not sigma > 0:
        raise CertificationError(f"sigma must be > 0, got {sigma}")
    if n < 1 or n0 < 1:
        raise CertificationError(f"n and n0 must be >= 1, got n={n}, n0={n0}")
    if not 0 < alpha < 1:
        raise CertificationError(f"alpha must lie in (0, 1), got {alpha}")
    if batch_size is not None and batch_size < 1:
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
