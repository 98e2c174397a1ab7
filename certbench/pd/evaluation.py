"""Robust accuracy under ℓ∞ ∩ PD: the attack protocol and its per-image report.

Robust accuracy under (ℓ∞ ∩ PD, ε) (Muthukumar et al. 2025, arXiv:2501.18098, §6) takes the worse
of two protocols: (a) ℓ∞ APGD-CE + APGD-T, each result lazily projected onto the PD sublevel set
(the paper's), and (b) the PD-aware APGD-CE + APGD-T. Plain ℓ∞ robust accuracy counts every
adversarial example any run found (all are inside the ℓ∞ ball), so it is never above the ℓ∞ ∩ PD
figure.

The attack is APGD (Croce & Hein 2020, ``certbench.pd.apgd``): ℓ∞ runs project with
:class:`~certbench.pd.apgd.LinfProjection`, PD-aware runs with
:class:`~certbench.pd.apgd.LinfPDProjection`. Every image's result is a :class:`RobustnessRecord`;
a :class:`RobustnessReport` holds them (Parquet, shard merging) and derives the leaderboard
figures.

Randomness: each image's random start derives from (seed, global image index, ε, run) only, so
shards by image range and different batch sizes run the same attack on each image; the 64-bit
start seed is used in full (``certbench.smoothing.streams``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn
from tqdm.auto import tqdm

from certbench.errors import ThreatModelError
from certbench.nets import RowSlots, canonical_layout
from certbench.pd.anchors import AnchorBank
from certbench.pd.apgd import LinfPDProjection, LinfProjection, Loss, apgd
from certbench.pd.lazy_projection import project_lazy
from certbench.pd.threat import PDThreat
from certbench.smoothing import derive_seed, write_table_atomic

DEFAULT_EPS = (8 / 255, 16 / 255)


@dataclass(frozen=True)
class RobustnessRecord:
    """One image at one ε. ``linf_pd_threat``: smallest d_PD among the ℓ∞ adversarial examples
    found (None if none), with its arg-max anchor (bank row, -1 if none) for attribution."""

    index: int
    label: int
    eps: float
    clean_prediction: int
    clean_correct: bool
    linf_robust: bool
    pd_robust: bool
    pd_robust_projected: bool
    pd_robust_aware: bool
    linf_pd_threat: float | None
    linf_pd_anchor: int


@dataclass(frozen=True)
class RobustnessReport:
    """Per-image records for every ε, and the accuracies derived from them."""

    records: list[RobustnessRecord] = field(default_factory=list)

    @property
    def eps_list(self) -> tuple[float, ...]:
        return tuple(sorted({r.eps for r in self.records}))

    def _select(self, eps: float) -> list[RobustnessRecord]:
        chosen = [r for r in self.records if math.isclose(r.eps, eps)]
        if not chosen:
            raise ThreatModelError(f"no records at eps={eps}; the report has {self.eps_list}.")
        return chosen

    def clean_accuracy(self) -> float:
        first = self._select(self.eps_list[0])
        return float(np.mean([r.clean_correct for r in first]))

    def linf_accuracy(self, eps: float) -> float:
        return float(np.mean([r.linf_robust for r in self._select(eps)]))

    def pd_accuracy(self, eps: float) -> float:
        return float(np.mean([r.pd_robust for r in self._select(eps)]))

    def summary(self) -> dict[str, float | None]:
        """Flat figures for a leaderboard row, e.g. ``pd_robust_accuracy_8``.

        Per ε (tag = ε·255): ℓ∞ and ℓ∞ ∩ PD robust accuracy, the ℓ∞ ∩ PD accuracy against each
        of the two attacks alone (``pd_projected_accuracy``: ℓ∞ then lazy projection, the
        paper's protocol; ``pd_aware_accuracy``: PD-aware APGD), and the median d_PD of the ℓ∞
        adversarial examples found (``linf_pd_threat_median``; None if none): how unsafe the ℓ∞
        attacks' perturbations are.
        """
        out: dict[str, float | None] = {
            "clean_accuracy": self.clean_accuracy(),
            "count": float(len(self._select(self.eps_list[0]))),
        }
        for eps in self.eps_list:
            tag = f"{round(eps * 255):d}"
            chosen = self._select(eps)
            threats = [r.linf_pd_threat for r in chosen if r.linf_pd_threat is not None]
            out[f"linf_robust_accuracy_{tag}"] = self.linf_accuracy(eps)
            out[f"pd_robust_accuracy_{tag}"] = self.pd_accuracy(eps)
            out[f"pd_projected_accuracy_{tag}"] = float(
                np.mean([r.pd_robust_projected for r in chosen])
            )
            out[f"pd_aware_accuracy_{tag}"] = float(np.mean([r.pd_robust_aware for r in chosen]))
            out[f"linf_pd_threat_median_{tag}"] = float(np.median(threats)) if threats else None
        return out

    def to_table(self) -> pa.Table:
        return pa.Table.from_pylist([r.__dict__ for r in self.records])

    @classmethod
    def from_table(cls, table: pa.Table) -> RobustnessReport:
        missing = {f.name for f in fields(RobustnessRecord)} - set(table.column_names)
        if missing:
            raise ThreatModelError(f"robustness table lacks columns {sorted(missing)}.")
        return cls([RobustnessRecord(**row) for row in table.to_pylist()])

    def write(self, path: str | Path, *, metadata: dict[str, str] | None = None) -> Path:
        """Parquet, written to a temp file then renamed; ``metadata`` goes into the schema."""
        table = self.to_table()
        if metadata:
            table = table.replace_schema_metadata(metadata)
        return write_table_atomic(table, path)

    @classmethod
    def read(cls, path: str | Path) -> RobustnessReport:
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowInvalid) as err:
            raise ThreatModelError(f"cannot read robustness records {str(path)!r}: {err}") from err
        return cls.from_table(table)

    @classmethod
    def merge(cls, reports: Sequence[RobustnessReport]) -> RobustnessReport:
        """Join shards (disjoint image ranges) into one report, ordered by (eps, index)."""
        rows = [r for report in reports for r in report.records]
        keys = [(r.eps, r.index) for r in rows]
        if len(set(keys)) != len(keys):
            raise ThreatModelError("shards overlap: the same (eps, image index) appears twice.")
        return cls(sorted(rows, key=lambda r: (r.eps, r.index)))


def _image_seeds(seed: int, indices: torch.Tensor, eps: float, run: int) -> list[int]:
    """64-bit seed of one image's run at one ε: from (seed, index, ε in 1/255000 units, run)."""
    keys = (round(eps * 255_000), run)
    return [derive_seed(seed, int(i), *keys) for i in indices]


def _targets(clean_logits: torch.Tensor, rank: int) -> torch.Tensor:
    """The class with the (rank+2)-th largest clean logit, as APGD-T targets them."""
    return clean_logits.argsort(dim=1, descending=True)[:, rank + 1]


@dataclass(frozen=True)
class _Runs:
    """All attack runs of one batch at one ε."""

    linf_broken: torch.Tensor
    projected_broken: torch.Tensor
    aware_broken: torch.Tensor
    linf_threat: torch.Tensor
    linf_anchor: torch.Tensor


def _attack_batch(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    clean_logits: torch.Tensor,
    indices: torch.Tensor,
    *,
    eps: float,
    threat: PDThreat,
    n_iter: int,
    n_target_classes: int,
    seed: int,
    pd_projection: Literal["exact", "lazy"],
) -> _Runs:
    plans: list[tuple[Loss, torch.Tensor | None]] = [("ce", None)]
    n_targets = min(n_target_classes, clean_logits.shape[1] - 1)
    if clean_logits.shape[1] >= 4:
        plans += [("dlr-targeted", _targets(clean_logits, r)) for r in range(n_targets)]
    linf = LinfProjection(eps)
    pd = LinfPDProjection(threat, eps_inf=eps, eps_pd=eps, exact=pd_projection == "exact")
    slots = RowSlots.of(indices, x.device)
    b_size = x.shape[0]
    linf_broken = torch.zeros(b_size, dtype=torch.bool, device=x.device)
    projected_broken = torch.zeros_like(linf_broken)
    aware_broken = torch.zeros_like(linf_broken)
    linf_threat = torch.full((b_size,), math.inf, device=x.device, dtype=torch.float64)
    linf_anchor = torch.full((b_size,), -1, device=x.device, dtype=torch.int64)
    for run, (loss, target) in enumerate(plans):
        seeds = _image_seeds(seed, indices, eps, run)
        found = apgd(
            model,
            x,
            y,
            eps=eps,
            projection=linf,
            seeds=seeds,
            slots=slots,
            n_iter=n_iter,
            loss=loss,
            target=target,
        )
        linf_broken |= found.success
        threat_values = threat.evaluate(x, found.delta, y, slots)
        value = threat_values.value.to(x.device, torch.float64)
        better = found.success & (value < linf_threat)
        linf_threat = torch.where(better, value, linf_threat)
        linf_anchor = torch.where(better, threat_values.anchor.to(x.device), linf_anchor)
        projected = project_lazy(
            threat, x, found.delta, y, eps_pd=eps, eps_inf=eps, slots=slots
        ).to(x.dtype)
        with torch.no_grad():
            projected_broken |= slots.forward(model, x + projected).argmax(1) != y
        aware = apgd(
            model,
            x,
            y,
            eps=eps,
            projection=pd,
            seeds=seeds,
            slots=slots,
            n_iter=n_iter,
            loss=loss,
            target=target,
        )
        aware_broken |= aware.success
    linf_threat = torch.where(
        torch.isinf(linf_threat), torch.full_like(linf_threat, math.nan), linf_threat
    )
    return _Runs(linf_broken, projected_broken, aware_broken, linf_threat, linf_anchor)


def robust_accuracy(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    anchors: AnchorBank | PDThreat,
    eps_list: Sequence[float] = DEFAULT_EPS,
    n_iter: int = 100,
    n_target_classes: int = 9,
    seed: int = 0,
    batch_size: int = 256,
    device: torch.device | str | None = None,
    indices: torch.Tensor | None = None,
    pd_projection: Literal["exact", "lazy"] = "exact",
    progress: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> RobustnessReport:
    """Clean, ℓ∞ and ℓ∞ ∩ PD robust accuracy of a deterministic classifier, per image.

    ``images``: uint8 (N, C, H, W) or float in [0, 1]; the model takes [0, 1] inputs (its
    normalisation is its first layer). ``indices``: global image indices (default 0..N−1), which
    seed each image's attack so shards reproduce the unsharded records. ``on_batch(n)`` is
    called after each batch with the images done so far (heartbeats, cancellation: it may raise).
    The model's weights are converted to channels-last in place, as ``certify`` leaves them.
    Pass a ``PDThreat`` built with ``class_weights=pdw_class_weights(bank)`` for PD-W.
    """
    if images.shape[0] != labels.shape[0]:
        raise ThreatModelError(f"images ({images.shape[0]}) and labels ({labels.shape[0]}) differ.")
    if not eps_list or any(e <= 0 for e in eps_list):
        raise ThreatModelError(
            f"eps_list={tuple(eps_list)} must hold positive radii, e.g. (8/255,)."
        )
    if batch_size < 1:
        raise ThreatModelError(f"batch_size={batch_size} must be at least 1.")
    first = next(model.parameters(), None)
    dev = (
        torch.device(device)
        if device is not None
        else (first.device if first is not None else torch.device("cpu"))
    )
    # every forward in fixed-shape chunks keyed by image index, channels-last: an image's attack
    # must depend neither on its batch nor on the layout certify() may have left a worker's
    # cached model in (certbench.nets.batch_invariance)
    model = canonical_layout(model.eval().to(dev))
    threat = anchors if isinstance(anchors, PDThreat) else PDThreat(anchors, device=dev)
    if threat.device != dev:
        raise ThreatModelError(f"the PDThreat lives on {threat.device} but the model on {dev}.")
    data = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    index = indices if indices is not None else torch.arange(images.shape[0])
    if index.shape[0] != images.shape[0]:
        raise ThreatModelError(f"indices ({index.shape[0]}) and images ({images.shape[0]}) differ.")
    records: list[RobustnessRecord] = []
    starts = range(0, images.shape[0], batch_size)
    for start in tqdm(starts, disable=not progress, desc="pd robustness"):
        x = data[start : start + batch_size].to(dev)
        y = labels[start : start + batch_size].to(dev)
        idx = index[start : start + batch_size]
        with torch.no_grad():
            clean_logits = RowSlots.of(idx, dev).forward(model, x)
        prediction = clean_logits.argmax(1)
        correct = prediction == y
        for eps in eps_list:
            linf, projected, aware = (
                torch.zeros(len(y), dtype=torch.bool, device=dev) for _ in range(3)
            )
            runs = _Runs(
                linf,
                projected,
                aware,
                torch.full((len(y),), math.nan, dtype=torch.float64, device=dev),
                torch.full((len(y),), -1, dtype=torch.int64, device=dev),
            )
            if bool(correct.any()):
                sub = _attack_batch(
                    model,
                    x[correct],
                    y[correct],
                    clean_logits[correct],
                    idx[correct.cpu()],
                    eps=eps,
                    threat=threat,
                    n_iter=n_iter,
                    n_target_classes=n_target_classes,
                    seed=seed,
                    pd_projection=pd_projection,
                )
                for full, part in zip(runs.__dict__.values(), sub.__dict__.values(), strict=True):
                    full[correct] = part
            pd_broken = runs.projected_broken | runs.aware_broken
            linf_broken = runs.linf_broken | pd_broken
            for j in range(len(y)):
                records.append(
                    RobustnessRecord(
                        index=int(idx[j]),
                        label=int(y[j]),
                        eps=float(eps),
                        clean_prediction=int(prediction[j]),
                        clean_correct=bool(correct[j]),
                        linf_robust=bool(correct[j] and not linf_broken[j]),
                        pd_robust=bool(correct[j] and not pd_broken[j]),
                        pd_robust_projected=bool(correct[j] and not runs.projected_broken[j]),
                        pd_robust_aware=bool(correct[j] and not runs.aware_broken[j]),
                        linf_pd_threat=None
                        if math.isnan(float(runs.linf_threat[j]))
                        else float(runs.linf_threat[j]),
                        linf_pd_anchor=int(runs.linf_anchor[j]),
                    )
                )
        if on_batch is not None:
            on_batch(min(start + batch_size, images.shape[0]))
    return RobustnessReport(sorted(records, key=lambda r: (r.eps, r.index)))
