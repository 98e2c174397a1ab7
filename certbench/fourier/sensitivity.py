"""Fourier sensitivity analysis of smoothed classifiers (Sun et al., ECCV 2022, §2.2, Fig. 3 and
Fig. 7).

For every distinct Fourier basis image U_{i,j} of the centred grid (``certbench.fourier.basis``:
construction, signs, RGB handling and the paper/code comparison), each test image is perturbed
to x̃ = x + r·ε·U_{i,j} and certified with Cohen et al.'s CERTIFY
(``certbench.smoothing.core.certify``,
the one sampler of the project: packing, per-image streams, early abstention); the heatmap cell
(i, j) is the ACR over the images. Sun et al.'s protocol: ε = 4, 200 test images per cell,
n0 = 100, n = 100,000, α = 0.001. Beside it, always, the base classifier's accuracy on the same
x̃ (no smoothing: Yin et al. 2019's own heatmap), which costs one forward pass per image.
Which 200 images: the paper does not say; we take every 50th test image (``skip=50``), spread
over the split like the 500-image protocol (the released ``analysis/fourier_heatmap.sh`` runs
``--skip 20``, i.e. 500 images, against the paper's "ACR of 200 examples").

Sharding: :func:`sensitivity_records` computes any subset (grid points × images). A record
depends only on (seed, test set, point, image index, protocol): the sign stream and the
certification stream of a point are keyed by the point, so records do not change with the other
points or images of the call, the batch size, or how a job is split; merging shards is
concatenation; ``certbench.fourier.heatmap`` mirror-fills the grid from the records and
summarises it by radial band.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from certbench.errors import SensitivityError
from certbench.fourier.basis import (
    Point,
    basis_image,
    canonical,
    perturb,
    perturbation_signs,
    point_key,
)
from certbench.nets import RowSlots, stable_argmax
from certbench.smoothing import CertifyRecord, certify

if TYPE_CHECKING:
    from certbench.fourier.protocol import SensitivityProtocol

_FROM_PROTOCOL = ("PROTOCOLS", "SensitivityProtocol", "get_protocol", "protocol_from_dict")


def __getattr__(name: str) -> Any:
    """The protocol names re-exported on first use: ``certbench.fourier.protocol`` needs
    pydantic, which the computation does not (the GPU image has none)."""
    if name in _FROM_PROTOCOL:
        from certbench.fourier import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SensitivityRecord", "point_stream", "sensitivity_records"]


@dataclass(frozen=True, slots=True)
class SensitivityRecord:
    """One image at one grid point: the base classifier's prediction and, if smoothed, CERTIFY's.

    ``(u, v)`` is the certified representative of the point (``fourier_basis.canonical``);
    ``signs`` holds r per channel.
    """

    u: int
    v: int
    index: int
    label: int
    signs: tuple[int, ...]
    epsilon: float
    base_prediction: int
    base_correct: bool
    certified: CertifyRecord | None = None

    @property
    def point(self) -> Point:
        return (self.u, self.v)


def sensitivity_records(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    indices: torch.Tensor | Sequence[int],
    points: Sequence[Point],
    protocol: SensitivityProtocol,
    seed: int = 0,
    *,
    sigma: float | None,
    test_set: str = "",
    batch_size: int = 1000,
    device: torch.device | str | None = None,
    amp: str | None = None,
    channels_last: bool = True,
    compile: bool | None = False,
    certify_batch_size: int | None = None,
    early_abstain: bool = False,
    on_record: Callable[[SensitivityRecord], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[SensitivityRecord]:
    """Records for every (point, image) pair, point-major, in the given orders.

    Args:
        images: float (N, C, d, d) in [0, 1], the clean test images; ``indices`` their positions
            in the split (they key the random streams, with ``seed`` and ``test_set``).
        points: grid points (i, j); a point and its mirror are the same basis image and are
            reported under the representative ``canonical(point)``; give each once.
        sigma: the smoothing noise level, or None for the base-classifier map only (cheap).
        batch_size: images per forward batch of the base classifier's map.
        device, amp, channels_last, compile, early_abstain: passed to ``certify``
            (``amp="auto"`` and ``compile=None`` take the engine's device defaults).
        certify_batch_size: noisy samples per CERTIFY forward batch; None: the engine's
            default for the device (``certbench.smoothing.defaults``). Counts do not depend
            on it.
        on_record: called as each record is final (heartbeats, cancellation).
        on_progress: called with the number of forward passes just done (progress bars): the
            base classifier's per point, then each certified image's n0 + n as it completes.

    Raises:
        SensitivityError: bad shapes, points off the grid or given twice.
        CertificationError: inconsistent certification arguments (from ``certify``).
    """
    x, y, idx = _check_inputs(images, labels, indices)
    size = x.shape[-1]
    reps = _representatives(points, size)
    target = _device(model, device)
    model.eval().to(target)
    if channels_last:  # as certify prepares it, so base predictions never depend on call order
        model.to(memory_format=torch.channels_last)
    records: list[SensitivityRecord] = []
    for point in reps:
        signs = perturbation_signs(
            point,
            idx,
            channels=x.shape[1],
            mode=protocol.channel_signs,
            seed=seed,
            test_set=test_set,
        )
        perturbed = perturb(x, basis_image(point, size), signs, protocol.epsilon)
        base, classes = _base_predictions(model, perturbed, idx, batch_size, target, channels_last)
        if y.size and int(y.max()) >= classes:
            raise SensitivityError(
                f"label {int(y.max())} is out of range for a model with {classes} outputs"
            )
        if on_progress is not None:
            on_progress(len(x))
        certified: list[CertifyRecord | None] = [None] * len(x)
        if sigma is not None:
            certified = list(
                certify(
                    model,
                    perturbed,
                    torch.from_numpy(y),
                    sigma=sigma,
                    n0=protocol.n0,
                    n=protocol.n,
                    alpha=protocol.alpha,
                    batch_size=certify_batch_size,
                    seed=seed,
                    device=target,
                    indices=torch.from_numpy(idx),
                    test_set=point_stream(test_set, point),
                    amp=amp,
                    channels_last=channels_last,
                    compile=compile,
                    early_abstain=early_abstain,
                    check_range=False,
                    on_record=None if on_progress is None else _passes(on_progress),
                )
            )
        for k in range(len(x)):
            record = SensitivityRecord(
                u=point[0],
                v=point[1],
                index=int(idx[k]),
                label=int(y[k]),
                signs=tuple(int(s) for s in signs[k]),
                epsilon=protocol.epsilon,
                base_prediction=int(base[k]),
                base_correct=bool(base[k] == y[k]),
                certified=certified[k],
            )
            records.append(record)
            if on_record is not None:
                on_record(record)
    return records


def _passes(on_progress: Callable[[int], None]) -> Callable[[CertifyRecord], None]:
    return lambda record: on_progress(record.n0 + record.n)


def point_stream(test_set: str, point: Point) -> str:
    """The test-set key of a point's certification stream: noise differs from point to point."""
    return f"{test_set}#fourier-sensitivity:{point_key(point)}"


def _representatives(points: Sequence[Point], size: int) -> list[Point]:
    reps = [canonical(p, size) for p in points]
    seen: set[Point] = set()
    for given, rep in zip(points, reps, strict=True):
        if rep in seen:
            raise SensitivityError(
                f"grid point {tuple(given)!r} is given twice (a point and its mirror are the "
                "same basis image); give each distinct point once"
            )
        seen.add(rep)
    return reps


def _check_inputs(
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    indices: torch.Tensor | Sequence[int],
) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        raise SensitivityError("images must be a float tensor of shape (N, C, H, W) in [0, 1]")
    if images.shape[-1] != images.shape[-2]:
        raise SensitivityError(
            f"images must be square for a d×d Fourier grid, got {tuple(images.shape[-2:])}"
        )
    if images.numel() and (float(images.min()) < 0.0 or float(images.max()) > 1.0):
        raise SensitivityError(
            f"images must be the clean test images in [0, 1], found values in "
            f"[{float(images.min()):.4g}, {float(images.max()):.4g}]; divide uint8 images by 255"
        )
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels, dtype=np.int64)
    idx = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, np.int64)
    n = len(images)
    if n == 0:
        raise SensitivityError("images is empty; give at least one test image")
    if y.shape != (n,) or idx.shape != (n,):
        raise SensitivityError(
            f"labels and indices must have shape ({n},), got {y.shape} and {idx.shape}"
        )
    if (idx < 0).any() or len(np.unique(idx)) != n:
        raise SensitivityError("indices must be N distinct non-negative image positions")
    return images.float(), y, idx


def _device(model: nn.Module, device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def _base_predictions(
    model: nn.Module,
    images: torch.Tensor,
    indices: np.ndarray,
    batch_size: int,
    device: torch.device,
    channels_last: bool,
) -> tuple[np.ndarray, int]:
    """argmax f(x̃) in fp32 (no autocast), chunked: one forward pass per image; and the number
    of classes the model outputs. Near ties are settled by evaluating those images in
    fixed-shape chunks keyed by their index (``certbench.nets.batch_invariance.stable_argmax``), so
    a prediction never depends on batch or shard."""
    out, classes = [], 0
    slots = RowSlots.of(torch.as_tensor(np.asarray(indices), dtype=torch.int64), device)
    with torch.inference_mode():
        for start in range(0, len(images), max(1, batch_size)):
            part = slice(start, start + batch_size)
            chunk = images[part].to(device)
            if channels_last:
                chunk = chunk.contiguous(memory_format=torch.channels_last)
            logits = model(chunk)
            if logits.dim() != 2 or len(logits) != len(chunk) or logits.shape[1] < 2:
                raise SensitivityError(
                    "model must return logits of shape (batch, classes >= 2), got "
                    f"{tuple(logits.shape)}"
                )
            out.append(stable_argmax(model, chunk, logits, slots.take(part)).cpu())
            classes = int(logits.shape[1])
    return torch.cat(out).numpy(), classes
