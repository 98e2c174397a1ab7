"""Projected Displacement (PD) threat (Muthukumar et al. 2025, arXiv:2501.18098, §3.2,
Appendix A.2-A.5).

The PD threat of a perturbation δ at an input x of class y is

    d_PD(x, δ) = max_{x̃ ∈ anchors of classes c ≠ y} max(⟨δ, x̃ − x⟩, 0) / (β·w(y, c)·‖x̃ − x‖²)

with β = 1/2 and w ≡ 1 (PD) or class weights (PD-W). Anchors are k training images per class
picked by greedy farthest-first selection on cosine similarity (Algorithm 1), a 2-approximation
of the discrete k-centre problem; they are built and stored by ``certbench.pd.anchors``.

Input space: every tensor here is in the model's input space *before* normalisation, i.e. pixels
in [0, 1] (uint8 / 255), channels-first, flattened to d = C·H·W. The threat is not invariant to
this choice (a mean/std normalisation rescales ⟨δ, u⟩ and ‖x̃ − x‖ differently per channel), so
inputs outside [0, 1] are refused rather than silently accepted.

All batched quantities come from matrix products with the anchor matrix A (M × d):
⟨δ, x̃⟩ − ⟨δ, x⟩ and ‖x̃‖² − 2⟨x, x̃⟩ + ‖x‖²; a B × M × d tensor is never formed.

This module holds the distance d_PD (:class:`PDThreat`), its class weighting (PD and PD-W), and
the paper's k_min rule. The projections onto its sublevel sets live in
``certbench.pd.lazy_projection`` and ``certbench.pd.exact_projection``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from certbench.errors import ThreatModelError
from certbench.nets import RowSlots
from certbench.pd.anchors import DEFAULT_K, AnchorBank, build_anchor_bank

__all__ = [
    "BETA",
    "DEFAULT_WEIGHT_FLOOR",
    "AnchorBank",
    "KMinResult",
    "PDThreat",
    "ThreatValues",
    "euclidean_class_distance",
    "find_k_min",
    "pdw_class_weights",
    "weighted_threat",
]

BETA = 0.5
#: PD-W: Definition 9 divides by W(y, c), which is 0 for the nearest class by construction of the
#: min-max normalisation; we map W to floor + (1 - floor)·W so that threats stay finite.
DEFAULT_WEIGHT_FLOOR = 0.25
_RANGE_TOL = 1e-6


@dataclass(frozen=True)
class ThreatValues:
    """d_PD per input and the anchor attaining it (row of the bank; -1 where the threat is 0)."""

    value: torch.Tensor
    anchor: torch.Tensor


class PDThreat:
    """The (k, β) PD threat, optionally weighted per class pair (PD-W).

    ``class_weights[y, c]`` in (0, 1] multiplies the normalisation β‖x̃ − x‖ of anchors of class
    c at inputs of class y (Definition 9); None means PD (all ones).
    """

    def __init__(
        self,
        bank: AnchorBank,
        *,
        beta: float = BETA,
        class_weights: torch.Tensor | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        batch_size: int = 256,
    ) -> None:
        if beta <= 0:
            raise ThreatModelError(f"beta={beta} must be positive (the paper uses 1/2).")
        c = bank.num_classes
        weights = torch.ones(c, c, dtype=torch.float64) if class_weights is None else class_weights
        if weights.shape != (c, c) or not bool(((weights > 0) & (weights <= 1)).all()):
            raise ThreatModelError(
                f"class_weights must be a {c}x{c} matrix with entries in (0, 1]; got shape "
                f"{tuple(weights.shape)}. Use pdw_class_weights() to build one."
            )
        self.bank = bank
        self.beta = beta
        self.batch_size = batch_size
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.anchors = bank.flat(dtype).to(self.device)
        # Squared norms in float64 by chunks: exact enough, without a float64 copy of the bank.
        self.anchor_sq = torch.cat(
            [(chunk.double() ** 2).sum(1) for chunk in self.anchors.split(1024)]
        ).to(dtype)
        self.anchor_labels = bank.labels.to(self.device)
        # coef[y, j] = 1/(β w(y, c_j)) for anchors of other classes, 0 for the own class.
        per_anchor = 1.0 / (beta * weights.double()[:, bank.labels])
        per_anchor[bank.labels.unsqueeze(0) == torch.arange(c).unsqueeze(1)] = 0.0
        self.coef = per_anchor.to(self.device, dtype)

    @property
    def num_anchors(self) -> int:
        return int(self.anchors.shape[0])

    def _prepare(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = x.reshape(x.shape[0], -1).to(self.device, self.dtype)
        if flat.shape[1] != self.anchors.shape[1]:
            raise ThreatModelError(
                f"inputs have {flat.shape[1]} values per image but the anchors have "
                f"{self.anchors.shape[1]}; use a bank built from the same image size."
            )
        lo, hi = float(flat.min()), float(flat.max())
        if lo < -_RANGE_TOL or hi > 1 + _RANGE_TOL:
            raise ThreatModelError(
                f"inputs span [{lo:.3g}, {hi:.3g}] but the PD threat lives in [0, 1] pixel "
                "space; pass ImageSet.as_float() (uint8/255), not normalised or 0..255 images."
            )
        labels = labels.to(self.device)
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.coef.shape[0]):
            raise ThreatModelError(
                f"labels span [{int(labels.min())}, {int(labels.max())}] but the bank has "
                f"{self.coef.shape[0]} classes."
            )
        return flat, labels

    def geometry(
        self, x: torch.Tensor, labels: torch.Tensor, slots: RowSlots | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(coef, ‖x̃ − x‖²) for a batch: (B, M) each, from one GEMM."""
        flat, labels = self._prepare(x, labels)
        slots = _slots(slots, flat.shape[0])
        return self.coef[labels], self._squared_distance(flat, slots.matmul(flat, self.anchors.T))

    def _squared_distance(self, flat: torch.Tensor, cross: torch.Tensor) -> torch.Tensor:
        sq = self.anchor_sq.unsqueeze(0) - 2 * cross + (flat * flat).sum(1, keepdim=True)
        return sq.clamp_min(1e-12)

    def ratios(
        self,
        x: torch.Tensor,
        delta: torch.Tensor,
        labels: torch.Tensor,
        slots: RowSlots | None = None,
    ) -> torch.Tensor:
        """max(⟨δ, x̃−x⟩, 0)/(βw‖x̃−x‖²) for every anchor: (B, M), zero on the own class.

        ``slots`` name the rows (``certbench.nets.batch_invariance``): with the same slots a row's
        value is bitwise the same in any batch. Default: the batch's own positions.
        """
        flat, labels = self._prepare(x, labels)
        slots = _slots(slots, flat.shape[0])
        d = delta.reshape(delta.shape[0], -1).to(self.device, self.dtype)
        cross = slots.matmul(flat, self.anchors.T)
        along = slots.matmul(d, self.anchors.T) - (d * flat).sum(1, keepdim=True)
        return along.clamp_min(0) * self.coef[labels] / self._squared_distance(flat, cross)

    def evaluate(
        self,
        x: torch.Tensor,
        delta: torch.Tensor,
        labels: torch.Tensor,
        slots: RowSlots | None = None,
    ) -> ThreatValues:
        """d_PD(x, δ) and the arg-max anchor, in chunks of ``batch_size`` inputs.

        Pass ``slots`` keyed by global image index wherever the rows may be evaluated in other
        batches elsewhere (shards, a CLI re-run): the values are then batch-independent."""
        if x.shape[0] != delta.shape[0] or x.shape[0] != labels.shape[0]:
            raise ThreatModelError(
                f"x ({x.shape[0]}), delta ({delta.shape[0]}) and labels ({labels.shape[0]}) "
                "must have the same batch size."
            )
        slots = _slots(slots, x.shape[0])
        values, anchors = [], []
        for start in range(0, x.shape[0], self.batch_size):
            part = slice(start, start + self.batch_size)
            r = self.ratios(x[part], delta[part], labels[part], slots.take(part))
            v, a = r.max(dim=1)
            values.append(v)
            anchors.append(torch.where(v > 0, a, torch.full_like(a, -1)))
        if not values:
            empty = torch.zeros(0, device=self.device)
            return ThreatValues(empty.to(self.dtype), empty.long())
        return ThreatValues(torch.cat(values), torch.cat(anchors))

    def __call__(
        self,
        x: torch.Tensor,
        delta: torch.Tensor,
        labels: torch.Tensor,
        slots: RowSlots | None = None,
    ) -> torch.Tensor:
        return self.evaluate(x, delta, labels, slots).value


def _slots(slots: RowSlots | None, count: int) -> RowSlots:
    """``slots``, or the batch's own positions; refuses slots of another batch size."""
    if slots is None:
        return RowSlots.positional(count)
    if len(slots) != count:
        raise ThreatModelError(f"{len(slots)} row slots for a batch of {count} inputs.")
    return slots


# --------------------------------------------------------------------------- k_min


@dataclass(frozen=True)
class KMinResult:
    """The paper's k_min rule on a sample of different-class training pairs."""

    k_min: int | None
    min_threat_by_k: dict[int, float]
    pairs: int


def find_k_min(
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    class_names: Sequence[str],
    k_max: int = DEFAULT_K,
    seed: int = 0,
    pairs: int = 2000,
    beta: float = BETA,
) -> KMinResult:
    """Smallest k ≤ k_max with d_PD,k(x, x̃ − x) > 1 on all sampled different-class pairs.

    Greedy selections are nested in k, so d_PD,k grows with k and the condition is monotone:
    a binary search over k needs only O(log k_max) threat evaluations.
    """
    full = build_anchor_bank(
        images, labels, class_names=class_names, dataset="k_min", k=k_max, seed=seed
    )
    rng = np.random.default_rng([seed, 1])
    first = rng.integers(len(labels), size=4 * pairs)
    second = rng.integers(len(labels), size=4 * pairs)
    differ = labels[first] != labels[second]
    first, second = first[differ.numpy()][:pairs], second[differ.numpy()][:pairs]
    if len(first) == 0:
        raise ThreatModelError("k_min needs training images of at least two classes.")
    x = images[first].float() / 255.0
    delta = images[second].float() / 255.0 - x
    y = labels[first]
    cache: dict[int, float] = {}

    def min_threat(k: int) -> float:
        if k not in cache:
            threat = PDThreat(full.truncated(k), beta=beta)
            cache[k] = float(threat(x, delta, y).min())
        return cache[k]

    lo, hi = 1, k_max
    if min_threat(hi) <= 1:
        return KMinResult(None, dict(sorted(cache.items())), len(first))
    while lo < hi:
        mid = (lo + hi) // 2
        if min_threat(mid) > 1:
            hi = mid
        else:
            lo = mid + 1
    return KMinResult(lo, dict(sorted(cache.items())), len(first))


# --------------------------------------------------------------------------- PD-W weights


def euclidean_class_distance(bank: AnchorBank) -> torch.Tensor:
    """L2(y, c) = mean ‖x − x̃‖ over anchor pairs of classes y and c (Definition 10)."""
    flat = bank.flat(torch.float64)
    sq = (flat * flat).sum(1)
    c = bank.num_classes
    out = torch.zeros(c, c, dtype=torch.float64)
    for y in range(c):
        rows = bank.labels == y
        dist = sq[rows].unsqueeze(1) - 2 * flat[rows] @ flat.T + sq.unsqueeze(0)
        mean_to_anchor = dist.clamp_min(0).sqrt().mean(0)
        out[y] = torch.zeros(c, dtype=torch.float64).index_add_(0, bank.labels, mean_to_anchor)
        out[y] /= torch.bincount(bank.labels, minlength=c).double()
    return out


def _min_max_rows(dist: torch.Tensor) -> torch.Tensor:
    """Scale each row to [0, 1] over the other classes (c ≠ y); the diagonal is set to 0."""
    c = dist.shape[0]
    off = ~torch.eye(c, dtype=torch.bool)
    big = torch.where(off, dist, torch.full_like(dist, math.inf))
    small = torch.where(off, dist, torch.full_like(dist, -math.inf))
    lo = big.min(1, keepdim=True).values
    hi = small.max(1, keepdim=True).values
    scaled = (dist - lo) / (hi - lo).clamp_min(1e-12)
    return torch.where(off, scaled.clamp(0, 1), torch.zeros_like(scaled))


def pdw_class_weights(
    bank: AnchorBank,
    *,
    class_to_coarse: torch.Tensor | None = None,
    floor: float = DEFAULT_WEIGHT_FLOOR,
) -> torch.Tensor:
    """PD-W class weights: Definition 13 with the Euclidean and hierarchy terms, no DreamSim.

    W(y, c) = min(W_Euclidean(y, c), W_hierarchy(y, c))², where the hierarchy term is the
    min-max-normalised path length in the two-level superclass tree (0 for the same superclass,
    1 otherwise: same superclass = near). Returned as floor + (1 − floor)·W so the threat of
    the nearest class stays finite (Definition 9 divides by W).
    """
    if not 0 < floor <= 1:
        raise ThreatModelError(f"floor={floor} must be in (0, 1].")
    w = _min_max_rows(euclidean_class_distance(bank))
    coarse = class_to_coarse if class_to_coarse is not None else bank.class_to_coarse
    if coarse is not None:
        hierarchy = (coarse.unsqueeze(0) != coarse.unsqueeze(1)).double()
        w = torch.minimum(w, hierarchy)
    w = w**2
    return floor + (1 - floor) * w


def weighted_threat(
    bank: AnchorBank, weighting: str, *, device: torch.device | str | None = None
) -> PDThreat:
    """``pd``: the plain threat; ``pdw``: PD-W with the bank's superclasses (Definition 13
    without DreamSim). Refuses PD-W on a bank without superclass labels rather than quietly
    falling back to the Euclidean term alone."""
    if weighting == "pd":
        return PDThreat(bank, device=device)
    if weighting != "pdw":
        raise ThreatModelError(f"weighting {weighting!r} is not 'pd' or 'pdw'.")
    if bank.class_to_coarse is None:
        raise ThreatModelError(
            f"PD-W needs superclass labels but the anchor bank of {bank.dataset!r} has none; "
            "build it from a split with coarse labels (CIFAR-100)."
        )
    return PDThreat(bank, class_weights=pdw_class_weights(bank), device=device)
