"""Projected Displacement (PD) threat (seed 004 §3.2, Appendix A.2-A.5).

The PD threat of a perturbation δ at an input x of class y is

    d_PD(x, δ) = max_{x̃ ∈ anchors of classes c ≠ y} max(⟨δ, x̃ − x⟩, 0) / (β·w(y, c)·‖x̃ − x‖²)

with β = 1/2 and w ≡ 1 (PD) or class weights (PD-W). Anchors are k training images per class
picked by greedy farthest-first selection on cosine similarity (Algorithm 1), a 2-approximation
of the discrete k-centre problem.

Input space: every tensor here is in the model's input space *before* normalisation, i.e. pixels
in [0, 1] (uint8 / 255), channels-first, flattened to d = C·H·W. The threat is not invariant to
this choice (a mean/std normalisation rescales ⟨δ, u⟩ and ‖x̃ − x‖ differently per channel), so
inputs outside [0, 1] are refused rather than silently accepted.

All batched quantities come from matrix products with the anchor matrix A (M × d):
⟨δ, x̃⟩ − ⟨δ, x⟩ and ‖x̃‖² − 2⟨x, x̃⟩ + ‖x‖²; a B × M × d tensor is never formed.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from certbench.batch_invariance import padded_matmul
from certbench.errors import ThreatModelError

BETA = 0.5
DEFAULT_K = 50
INPUT_SPACE = "pixels in [0,1] (uint8/255), channels-first, flattened C*H*W"
BANK_FORMAT = "certbench-pd-anchors/1"
#: PD-W: Definition 9 divides by W(y, c), which is 0 for the nearest class by construction of the
#: min-max normalisation; we map W to floor + (1 - floor)·W so that threats stay finite.
DEFAULT_WEIGHT_FLOOR = 0.25
_RANGE_TOL = 1e-6


# --------------------------------------------------------------------------- anchors


def greedy_k_center(features: torch.Tensor, k: int, *, start: int) -> torch.Tensor:
    """Farthest-first traversal on cosine similarity (Algorithm 1), from index ``start``.

    Returns the selected row indices in selection order; the first j of them are exactly the
    greedy selection of size j, which makes the k_min search incremental.
    """
    n = features.shape[0]
    if not 0 <= start < n:
        raise ThreatModelError(f"start={start} is outside the {n} candidate rows; pick 0..{n - 1}.")
    k = min(k, n)
    unit = _unit_rows(features.double())
    chosen = [start]
    max_sim = unit @ unit[start]
    taken = torch.zeros(n, dtype=torch.bool)
    taken[start] = True
    for _ in range(k - 1):
        # argmin returns the first minimum, so ties resolve to the smallest index (deterministic).
        candidate = torch.where(taken, torch.full_like(max_sim, math.inf), max_sim)
        nxt = int(torch.argmin(candidate))
        chosen.append(nxt)
        taken[nxt] = True
        max_sim = torch.maximum(max_sim, unit @ unit[nxt])
    return torch.tensor(chosen, dtype=torch.int64)


def k_center_objective(features: torch.Tensor, selected: torch.Tensor) -> float:
    """f(A) = min_x max_{a∈A} cos(x, a) (Eq. 5): larger is a better cover."""
    unit = _unit_rows(features.double())
    return float((unit @ unit[selected].T).max(dim=1).values.min())


def _unit_rows(rows: torch.Tensor) -> torch.Tensor:
    rows = rows.reshape(rows.shape[0], -1)
    return rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _class_start(seed: int, label: int, n: int) -> int:
    """The random first element of Algorithm 1, derived from (seed, class) only."""
    return int(np.random.default_rng([seed, label]).integers(n))


def select_anchor_order(
    images: torch.Tensor, labels: torch.Tensor, *, k: int, seed: int, num_classes: int
) -> list[torch.Tensor]:
    """Per class, the greedy k-centre order (indices into ``images``), at most k long."""
    if k < 1:
        raise ThreatModelError(f"k={k} must be at least 1 anchor per class.")
    flat = images.reshape(images.shape[0], -1)
    order: list[torch.Tensor] = []
    for c in range(num_classes):
        members = torch.nonzero(labels == c).flatten()
        if members.numel() == 0:
            raise ThreatModelError(
                f"class {c} has no training images; anchors need every class of the "
                f"{num_classes} classes present (check the split or num_classes)."
            )
        local = greedy_k_center(
            flat[members].float(), k, start=_class_start(seed, c, members.numel())
        )
        order.append(members[local])
    return order


@dataclass(frozen=True)
class AnchorBank:
    """k representative training images per class, with their provenance.

    ``images`` are uint8 (M, C, H, W) so the bank is exact and 4× smaller than float32;
    ``class_to_coarse`` maps each fine class to its superclass (CIFAR-100), for PD-W.
    """

    images: torch.Tensor
    labels: torch.Tensor
    source_indices: torch.Tensor
    class_names: tuple[str, ...]
    k: int
    seed: int
    dataset: str
    revision: str | None = None
    split: str = "train"
    class_to_coarse: torch.Tensor | None = None
    coarse_class_names: tuple[str, ...] | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def dim(self) -> int:
        return int(np.prod(self.images.shape[1:]))

    def flat(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The anchors in the threat's input space: (M, d) in [0, 1]."""
        return self.images.reshape(self.images.shape[0], -1).to(dtype) / 255.0

    def truncated(self, k: int) -> AnchorBank:
        """The bank of the first k anchors per class (= the greedy selection of size k)."""
        keep = torch.cat(
            [torch.nonzero(self.labels == c).flatten()[:k] for c in range(self.num_classes)]
        )
        return AnchorBank(
            images=self.images[keep],
            labels=self.labels[keep],
            source_indices=self.source_indices[keep],
            class_names=self.class_names,
            k=min(k, self.k),
            seed=self.seed,
            dataset=self.dataset,
            revision=self.revision,
            split=self.split,
            class_to_coarse=self.class_to_coarse,
            coarse_class_names=self.coarse_class_names,
        )

    def metadata(self) -> dict[str, str]:
        """Provenance stored in the safetensors header (strings only)."""
        meta = {
            "format": BANK_FORMAT,
            "dataset": self.dataset,
            "revision": self.revision or "",
            "split": self.split,
            "seed": str(self.seed),
            "k": str(self.k),
            "selection": "greedy farthest-first on cosine similarity (seed 004 Algorithm 1)",
            "input_space": INPUT_SPACE,
            "class_names": json.dumps(list(self.class_names)),
        }
        if self.coarse_class_names is not None:
            meta["coarse_class_names"] = json.dumps(list(self.coarse_class_names))
        return meta

    def save(self, path: str | Path) -> Path:
        """Write the bank atomically (temp file, then rename) as safetensors."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {
            "images": self.images.contiguous(),
            "labels": self.labels.contiguous(),
            "source_indices": self.source_indices.contiguous(),
        }
        if self.class_to_coarse is not None:
            tensors["class_to_coarse"] = self.class_to_coarse.contiguous()
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        os.close(fd)
        try:
            save_file(tensors, tmp, metadata=self.metadata())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    @classmethod
    def load(cls, path: str | Path) -> AnchorBank:
        """Read a bank written by :meth:`save` (safetensors only, never pickle)."""
        path = Path(path)
        if not path.is_file():
            raise ThreatModelError(
                f"anchor bank {str(path)!r} does not exist; build one with "
                "`certbench anchors build SOURCE --out PATH`."
            )
        try:
            with safe_open(str(path), framework="pt") as handle:
                meta = handle.metadata() or {}
                tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
        except Exception as err:  # safetensors raises its own SafetensorError / OSError types
            raise ThreatModelError(
                f"anchor bank {str(path)!r} is not a readable safetensors file: {err}"
            ) from err
        if meta.get("format") != BANK_FORMAT:
            raise ThreatModelError(
                f"anchor bank {str(path)!r} has format {meta.get('format')!r}, expected "
                f"{BANK_FORMAT!r}; rebuild it with `certbench anchors build`."
            )
        missing = {"images", "labels", "source_indices"} - tensors.keys()
        if missing:
            raise ThreatModelError(f"anchor bank {str(path)!r} lacks tensors {sorted(missing)}.")
        coarse_names = meta.get("coarse_class_names")
        return cls(
            images=tensors["images"],
            labels=tensors["labels"],
            source_indices=tensors["source_indices"],
            class_names=tuple(json.loads(meta["class_names"])),
            k=int(meta["k"]),
            seed=int(meta["seed"]),
            dataset=meta["dataset"],
            revision=meta.get("revision") or None,
            split=meta.get("split", "train"),
            class_to_coarse=tensors.get("class_to_coarse"),
            coarse_class_names=tuple(json.loads(coarse_names)) if coarse_names else None,
        )


def build_anchor_bank(
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    class_names: Sequence[str],
    dataset: str,
    k: int = DEFAULT_K,
    seed: int = 0,
    revision: str | None = None,
    split: str = "train",
    source_indices: torch.Tensor | None = None,
    coarse_labels: torch.Tensor | None = None,
    coarse_class_names: Sequence[str] | None = None,
) -> AnchorBank:
    """Select k anchors per class from uint8 training images (N, C, H, W)."""
    if images.dtype != torch.uint8:
        raise ThreatModelError(
            f"images have dtype {images.dtype}; pass the uint8 training images (ImageSet.images)."
        )
    if images.shape[0] != labels.shape[0]:
        raise ThreatModelError(
            f"images ({images.shape[0]}) and labels ({labels.shape[0]}) differ in length."
        )
    order = select_anchor_order(images, labels, k=k, seed=seed, num_classes=len(class_names))
    keep = torch.cat(order)
    positions = source_indices if source_indices is not None else torch.arange(len(labels))
    class_to_coarse = None
    if coarse_labels is not None:
        class_to_coarse = torch.stack(
            [coarse_labels[labels == c][0] for c in range(len(class_names))]
        ).to(torch.int64)
    return AnchorBank(
        images=images[keep].contiguous(),
        labels=labels[keep].to(torch.int64),
        source_indices=positions[keep].to(torch.int64),
        class_names=tuple(class_names),
        k=k,
        seed=seed,
        dataset=dataset,
        revision=revision,
        split=split,
        class_to_coarse=class_to_coarse,
        coarse_class_names=tuple(coarse_class_names) if coarse_class_names else None,
    )


def bank_from_image_set(
    image_set: Any,
    *,
    dataset: str,
    k: int = DEFAULT_K,
    seed: int = 0,
    revision: str | None = None,
    split: str = "train",
) -> AnchorBank:
    """Build a bank from a ``certbench.data.ImageSet`` of the training split."""
    return build_anchor_bank(
        image_set.images,
        image_set.labels,
        class_names=image_set.class_names,
        dataset=dataset,
        k=k,
        seed=seed,
        revision=revision,
        split=split,
        source_indices=image_set.indices,
        coarse_labels=image_set.coarse_labels,
        coarse_class_names=image_set.coarse_class_names,
    )


# --------------------------------------------------------------------------- threat


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

    def geometry(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(coef, ‖x̃ − x‖²) for a batch: (B, M) each, from one GEMM."""
        flat, labels = self._prepare(x, labels)
        return self.coef[labels], self._squared_distance(flat, self._cross(flat))

    def _cross(self, rows: torch.Tensor) -> torch.Tensor:
        """``rows @ Aᵀ`` on a batch padded to ``MIN_ROWS``, so that a row's products do not depend
        on how many rows share the GEMM (``certbench.batch_invariance``)."""
        return padded_matmul(rows, self.anchors.T)

    def _squared_distance(self, flat: torch.Tensor, cross: torch.Tensor) -> torch.Tensor:
        sq = self.anchor_sq.unsqueeze(0) - 2 * cross + (flat * flat).sum(1, keepdim=True)
        return sq.clamp_min(1e-12)

    def ratios(self, x: torch.Tensor, delta: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """max(⟨δ, x̃−x⟩, 0)/(βw‖x̃−x‖²) for every anchor: (B, M), zero on the own class.

        x and δ share one GEMM with the anchors ([x; δ] Aᵀ), the larger kernel running faster.
        """
        flat, labels = self._prepare(x, labels)
        d = delta.reshape(delta.shape[0], -1).to(self.device, self.dtype)
        both = self._cross(torch.cat([flat, d]))
        cross, along = both[: flat.shape[0]], both[flat.shape[0] :]
        along = along - (d * flat).sum(1, keepdim=True)
        return along.clamp_min(0) * self.coef[labels] / self._squared_distance(flat, cross)

    def evaluate(self, x: torch.Tensor, delta: torch.Tensor, labels: torch.Tensor) -> ThreatValues:
        """d_PD(x, δ) and the arg-max anchor, in chunks of ``batch_size`` inputs."""
        if x.shape[0] != delta.shape[0] or x.shape[0] != labels.shape[0]:
            raise ThreatModelError(
                f"x ({x.shape[0]}), delta ({delta.shape[0]}) and labels ({labels.shape[0]}) "
                "must have the same batch size."
            )
        values, anchors = [], []
        for start in range(0, x.shape[0], self.batch_size):
            part = slice(start, start + self.batch_size)
            r = self.ratios(x[part], delta[part], labels[part])
            v, a = r.max(dim=1)
            values.append(v)
            anchors.append(torch.where(v > 0, a, torch.full_like(a, -1)))
        if not values:
            empty = torch.zeros(0, device=self.device)
            return ThreatValues(empty.to(self.dtype), empty.long())
        return ThreatValues(torch.cat(values), torch.cat(anchors))

    def __call__(self, x: torch.Tensor, delta: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.evaluate(x, delta, labels).value


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


# --------------------------------------------------------------------------- projections


def linf_box(x: torch.Tensor, eps_inf: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds of δ for the ℓ∞ ball of radius eps_inf intersected with the [0, 1] image box."""
    return (-x).clamp(min=-eps_inf), (1 - x).clamp(max=eps_inf)


def project_lazy(
    threat: PDThreat,
    x: torch.Tensor,
    delta: torch.Tensor,
    labels: torch.Tensor,
    *,
    eps_pd: float,
    eps_inf: float = math.inf,
) -> torch.Tensor:
    """Clip δ to the ℓ∞/box set, then scale by min(1, ε/d_PD): feasible, not nearest.

    The box contains 0, so scaling towards 0 keeps the clipped point inside it.
    """
    lo, hi = linf_box(x, eps_inf)
    clipped = torch.maximum(torch.minimum(delta, hi), lo)
    value = threat(x, clipped, labels).to(clipped.device, clipped.dtype)
    scale = torch.where(value > eps_pd, eps_pd / value.clamp_min(1e-30), torch.ones_like(value))
    return clipped * scale.view(-1, *([1] * (clipped.dim() - 1)))


@dataclass(frozen=True)
class ExactProjection:
    """Euclidean projection and its certificate.

    ``raw`` = clip(z − Σ λ_j u_j) is the dual-optimal primal point (stationary by construction);
    ``delta`` is ``raw`` made strictly feasible by a lazy scaling that moves it by at most the
    reported violation. ``multipliers`` λ (B, M) belong to the unit-normalised halfspaces
    ⟨δ, u_j⟩ ≤ ε·β·w·‖x̃_j − x‖ with u_j = (x̃_j − x)/‖x̃_j − x‖.
    """

    delta: torch.Tensor
    raw: torch.Tensor
    multipliers: torch.Tensor
    iterations: int
    max_violation: float


@dataclass(frozen=True)
class Halfspaces:
    """The feasible set at a batch of inputs, independent of the point being projected.

    Rows u_j = (x̃_j − x)/‖x̃_j − x‖ of other-class anchors with bounds
    b_j = ε·β·w·‖x̃_j − x‖, the ℓ∞/box bounds [lo, hi], and a Lipschitz constant of the dual
    gradient. Built once per batch so that an attack projecting every step pays for it once.
    """

    threat: PDThreat
    flat_x: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    inv_norm: torch.Tensor
    bound: torch.Tensor
    active: torch.Tensor
    step: torch.Tensor
    eps_pd: float
    eps_inf: float

    def transpose_apply(self, lam: torch.Tensor) -> torch.Tensor:
        """Uᵀλ = (λ/n)ᵀA − (Σλ/n)·x."""
        w = lam * self.inv_norm
        return padded_matmul(w, self.threat.anchors) - w.sum(1, keepdim=True) * self.flat_x

    def slack(self, d: torch.Tensor) -> torch.Tensor:
        """Uδ − b on the active rows, 0 elsewhere (GEMMs padded, as for every batch here)."""
        along = padded_matmul(d, self.threat.anchors.T) - (d * self.flat_x).sum(1, keepdim=True)
        return torch.where(self.active, along * self.inv_norm - self.bound, torch.zeros_like(along))

    def clip(self, d: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(d, self.hi), self.lo)


def halfspaces(
    threat: PDThreat,
    x: torch.Tensor,
    labels: torch.Tensor,
    *,
    eps_pd: float,
    eps_inf: float = math.inf,
    power_iterations: int = 20,
) -> Halfspaces:
    """Describe {d_PD ≤ ε_pd} ∩ ℓ∞(ε_inf) ∩ box at each input of a batch."""
    flat_x, labels_d = threat._prepare(x, labels)
    lo, hi = linf_box(flat_x, eps_inf)
    coef, sq = threat.geometry(flat_x, labels_d)
    norm = sq.sqrt()
    active = coef > 0
    inv_norm = torch.where(active, 1.0 / norm, torch.zeros_like(norm))
    # ⟨δ, u_j⟩ ≤ ε·β·w·‖x̃−x‖  ⇔  coef·⟨δ, x̃−x⟩/‖x̃−x‖² ≤ ε.
    bound = torch.where(active, eps_pd * norm / coef.clamp_min(1e-30), torch.zeros_like(norm))
    lipschitz = _gram_norm(threat.anchors, flat_x, inv_norm, power_iterations)
    return Halfspaces(
        threat=threat,
        flat_x=flat_x,
        lo=lo,
        hi=hi,
        inv_norm=inv_norm,
        bound=bound,
        active=active,
        step=(1.0 / lipschitz).unsqueeze(1),
        eps_pd=eps_pd,
        eps_inf=eps_inf,
    )


def project_exact(
    threat: PDThreat,
    x: torch.Tensor,
    delta: torch.Tensor,
    labels: torch.Tensor,
    *,
    eps_pd: float,
    eps_inf: float = math.inf,
    max_iter: int = 500,
    tol: float = 1e-6,
    sets: Halfspaces | None = None,
    warm_start: torch.Tensor | None = None,
) -> ExactProjection:
    """Euclidean projection onto {d_PD ≤ ε_pd} ∩ ℓ∞(ε_inf) ∩ [0,1]-box by dual ascent.

    The dual of min ½‖δ − z‖² s.t. ⟨δ, u_j⟩ ≤ b_j, lo ≤ δ ≤ hi is a concave maximisation over
    λ ≥ 0 with δ(λ) = clip(z − Uᵀλ, lo, hi) and gradient Uδ(λ) − b; we run FISTA with adaptive
    restart on it, from ``warm_start`` multipliers if given (consecutive attack iterates have
    nearby optima). Each image stops when it is feasible and complementary to ``tol`` (in ℓ2
    units of δ), so its result does not depend on its batch; ``iterations`` counts the steps of
    the slowest. ``sets`` reuses the geometry of :func:`halfspaces` across calls.
    """
    shape = delta.shape
    b_size = shape[0]
    hs = sets or halfspaces(threat, x, labels, eps_pd=eps_pd, eps_inf=eps_inf)
    z = delta.reshape(b_size, -1).to(threat.device, threat.dtype)

    def primal(lam: torch.Tensor) -> torch.Tensor:
        return hs.clip(z - hs.transpose_apply(lam))

    lam = torch.zeros_like(hs.bound) if warm_start is None else warm_start.clone() * hs.active
    lam_prev = lam
    momentum_t = torch.ones(b_size, 1, device=z.device, dtype=z.dtype)
    raw = primal(lam)
    s = hs.slack(raw)
    settled = _settled(s, lam, tol)
    iterations = 0
    for step_index in range(1, max_iter + 1):
        if bool(settled.all()):
            break
        iterations = step_index
        t_next = (1 + torch.sqrt(1 + 4 * momentum_t**2)) / 2
        y = lam + ((momentum_t - 1) / t_next) * (lam - lam_prev)
        grad = hs.slack(primal(y))
        new = (y + hs.step * grad).clamp_min(0) * hs.active
        # Restart momentum where the step points against the ascent direction.
        restart = (grad * (new - lam)).sum(1, keepdim=True) < 0
        # A settled image keeps its multipliers: it stops where it would stop in a batch of one.
        moving = ~settled.unsqueeze(1)
        restarted = torch.where(restart, torch.ones_like(t_next), t_next)
        momentum_t = torch.where(moving, restarted, momentum_t)
        lam_prev, lam = torch.where(moving, lam, lam_prev), torch.where(moving, new, lam)
        raw = primal(lam)
        s = hs.slack(raw)
        settled = settled | _settled(s, lam, tol)
    violation = s.clamp_min(0).amax(1) if s.shape[1] else torch.zeros(b_size)
    raw_shaped = raw.reshape(shape)
    safe = project_lazy(threat, x, raw_shaped, labels, eps_pd=eps_pd, eps_inf=eps_inf)
    return ExactProjection(
        delta=safe.to(delta.dtype),
        raw=raw_shaped,
        multipliers=lam,
        iterations=iterations,
        max_violation=float(violation.max()) if b_size else 0.0,
    )


def _settled(slack: torch.Tensor, lam: torch.Tensor, tol: float) -> torch.Tensor:
    """Per image: feasible and complementary to ``tol``, the dual ascent's stopping rule.

    Decided image by image (not once for the batch): an image whose multipliers kept moving
    until its batch-mates converged would end elsewhere than in a batch of one, and an attack's
    records would depend on which images share its batch.
    """
    if not slack.shape[1]:
        return torch.ones(slack.shape[0], dtype=torch.bool, device=slack.device)
    violation = slack.clamp_min(0).amax(1)
    return (violation <= tol) & ((lam * slack.abs()).amax(1) <= tol)


def _gram_norm(
    anchors: torch.Tensor, flat_x: torch.Tensor, inv_norm: torch.Tensor, iters: int = 20
) -> torch.Tensor:
    """Per-image upper estimate of ‖U Uᵀ‖₂ by power iteration (×1.2 margin, ≤ ‖U‖_F²)."""
    v = (inv_norm > 0).to(anchors.dtype)
    estimate = torch.ones(flat_x.shape[0], device=anchors.device, dtype=anchors.dtype)
    for _ in range(iters):
        w = v * inv_norm
        ut_v = padded_matmul(w, anchors) - w.sum(1, keepdim=True) * flat_x
        uu_v = (padded_matmul(ut_v, anchors.T) - (ut_v * flat_x).sum(1, keepdim=True)) * inv_norm
        estimate = uu_v.norm(dim=1) / v.norm(dim=1).clamp_min(1e-30)
        v = uu_v / uu_v.norm(dim=1, keepdim=True).clamp_min(1e-30)
    frobenius = (inv_norm > 0).sum(1).to(anchors.dtype)
    return torch.minimum(1.2 * estimate, frobenius).clamp_min(1e-12)
