"""Anchor banks of the Projected Displacement (PD) threat (Muthukumar et al. 2025, arXiv:2501.18098,
§3.2, Algorithm 1).

The PD threat (``certbench.pd.threat``) compares a perturbation with the directions from an input
to *anchors*: k training images per class picked by greedy farthest-first selection on cosine
similarity (Algorithm 1), a 2-approximation of the discrete k-centre problem. This module selects
them (seeded, deterministic) and stores them as an :class:`AnchorBank`: uint8 images with their
provenance in a safetensors file (never pickle), written atomically. Kept apart from the threat
because a bank is built once per training split (``certbench anchors build``, or by a worker that
finds the file missing) and only read afterwards.

Input space: anchors are used as pixels in [0, 1] (uint8 / 255), channels-first, flattened to
d = C·H·W (:data:`INPUT_SPACE`, recorded in every bank's header), the space of the threat.
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

from certbench.errors import ThreatModelError

DEFAULT_K = 50
INPUT_SPACE = "pixels in [0,1] (uint8/255), channels-first, flattened C*H*W"
BANK_FORMAT = "certbench-pd-anchors/1"


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
            "selection": (
                "greedy farthest-first on cosine similarity (Muthukumar et al. 2025, "
                "arXiv:2501.18098, Algorithm 1)"
            ),
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
    """Build a bank from a ``certbench.data.sources.ImageSet`` of the training split."""
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
