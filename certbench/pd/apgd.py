"""APGD (Croce & Hein 2020) with a pluggable projection: APGD-CE and APGD-T (targeted DLR).

One attack serves two threat models: the step is the ℓ∞ steepest-ascent step η·sign(∇), and the
feasible set enters only through ``projection.bind(x, labels, slots)(δ) -> δ``. With
:class:`LinfProjection` this is standard APGD; with :class:`LinfPDProjection` every iterate
lies in ℓ∞ ∩ PD ∩ box (the PD-aware attack of DESIGN.md §7).

Kept apart from the robust-accuracy protocol that runs it (``certbench.pd.evaluation``): the
attack itself knows nothing of records, ε grids or how runs are combined.

Randomness: the random start of an image comes from that image's own 64-bit seed, drawn on the
CPU whatever the device, with all 64 bits used (``certbench.smoothing.streams``); callers derive the
seeds per image (``certbench.pd.evaluation``), so a batch's composition never changes an
image's start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from certbench.errors import ThreatModelError
from certbench.nets import RowSlots
from certbench.pd.exact_projection import halfspaces, project_exact
from certbench.pd.lazy_projection import linf_box, project_lazy
from certbench.pd.threat import PDThreat
from certbench.smoothing import seeded_generator

Bound = Callable[[torch.Tensor], torch.Tensor]
Loss = Literal["ce", "dlr-targeted"]


# --------------------------------------------------------------------------- projections


class Projection(Protocol):
    """A feasible set at a batch: ``bind(x, labels, slots)`` returns δ ↦ its projection.

    Binding once per batch lets a projection precompute what depends on x only (the PD
    halfspaces) and keep state across the attack's steps (warm-started multipliers). ``slots``
    name the rows (``certbench.nets.batch_invariance``) so that a row's projection is bitwise the
    same in any batch.
    """

    def bind(self, x: torch.Tensor, labels: torch.Tensor, slots: RowSlots) -> Bound: ...


@dataclass(frozen=True)
class LinfProjection:
    """δ ↦ clip(δ) onto the ℓ∞ ball of radius eps intersected with the [0, 1] box."""

    eps: float

    def bind(self, x: torch.Tensor, labels: torch.Tensor, slots: RowSlots) -> Bound:
        lo, hi = linf_box(x, self.eps)
        return lambda delta: torch.maximum(torch.minimum(delta, hi), lo)


@dataclass(frozen=True)
class LinfPDProjection:
    """Projection onto {d_PD ≤ eps_pd} ∩ ℓ∞(eps_inf) ∩ box: exact (Euclidean) or lazy.

    The exact variant warm-starts each call from the previous call's multipliers and stops at
    ``tol`` (ℓ2 units of δ) or ``max_iter`` dual steps; an attack needs a good feasible point,
    not a certificate, and the result is always feasible (project_exact ends with a lazy
    safeguard).
    """

    threat: PDThreat
    eps_inf: float
    eps_pd: float
    exact: bool = True
    max_iter: int = 30
    tol: float = 1e-3

    def bind(self, x: torch.Tensor, labels: torch.Tensor, slots: RowSlots) -> Bound:
        if not self.exact:
            return lambda delta: project_lazy(
                self.threat, x, delta, labels, eps_pd=self.eps_pd, eps_inf=self.eps_inf,
                slots=slots,
            ).to(delta.device, delta.dtype)  # fmt: skip
        sets = halfspaces(
            self.threat, x, labels, eps_pd=self.eps_pd, eps_inf=self.eps_inf, slots=slots
        )
        state: dict[str, torch.Tensor] = {}

        def project(delta: torch.Tensor) -> torch.Tensor:
            result = project_exact(
                self.threat,
                x,
                delta,
                labels,
                eps_pd=self.eps_pd,
                eps_inf=self.eps_inf,
                max_iter=self.max_iter,
                tol=self.tol,
                sets=sets,
                warm_start=state.get("lam"),
            )
            state["lam"] = result.multipliers
            return result.delta.to(delta.device, delta.dtype)

        return project


# --------------------------------------------------------------------------- losses


def margin_dlr_targeted(
    logits: torch.Tensor, labels: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Targeted DLR: −(z_y − z_t)/(z_π1 − (z_π3 + z_π4)/2), scale-invariant in the logits."""
    if logits.shape[1] < 4:
        raise ThreatModelError(
            f"the targeted DLR loss needs at least 4 classes, the model has {logits.shape[1]}; "
            "use loss='ce'."
        )
    ordered = logits.sort(dim=1).values
    own = logits.gather(1, labels[:, None]).squeeze(1)
    other = logits.gather(1, target[:, None]).squeeze(1)
    scale = ordered[:, -1] - 0.5 * (ordered[:, -3] + ordered[:, -4]) + 1e-12
    return -(own - other) / scale


def _loss(
    logits: torch.Tensor, labels: torch.Tensor, loss: Loss, target: torch.Tensor | None
) -> torch.Tensor:
    if loss == "ce":
        return F.cross_entropy(logits, labels, reduction="none")
    if target is None:
        raise ThreatModelError("loss='dlr-targeted' needs a target class per image.")
    return margin_dlr_targeted(logits, labels, target)


# --------------------------------------------------------------------------- APGD


@dataclass(frozen=True)
class APGDResult:
    """Per image: the last misclassified iterate if any (``success``), else the best-loss one."""

    delta: torch.Tensor
    success: torch.Tensor
    best_loss: torch.Tensor


def checkpoints(n_iter: int) -> list[int]:
    """Iterations at which APGD may halve the step.

    The first after ⌊0.22·N⌋ steps; each following gap shrinks by ⌊0.03·N⌋ down to ⌊0.06·N⌋
    (p_{j+1} = p_j + max(p_j − p_{j−1} − 0.03, 0.06) of the paper, in whole iterations).
    """
    gap = max(int(0.22 * n_iter), 1)
    shrink, smallest = max(int(0.03 * n_iter), 1), max(int(0.06 * n_iter), 1)
    points, at = [], gap
    while at < n_iter:
        points.append(at)
        gap = max(gap - shrink, smallest)
        at += gap
    return points


def random_start(
    shape: tuple[int, ...], eps: float, seeds: Sequence[int], device: torch.device
) -> torch.Tensor:
    """Per-image uniform direction scaled to ℓ∞ norm eps, from that image's own 64-bit seed.

    Drawn on the CPU whatever the device (the same start everywhere), with all 64 bits of the
    seed (``certbench.smoothing.streams``; torch's ``manual_seed`` would keep only 32 on CPU).
    """
    starts = []
    for s in seeds:
        g = seeded_generator(int(s))
        t = 2 * torch.rand(shape, generator=g, dtype=torch.float64) - 1
        starts.append(eps * t / t.abs().max().clamp_min(1e-12))
    return torch.stack(starts).to(device)


def apgd(
    model: nn.Module,
    x: torch.Tensor,
    labels: torch.Tensor,
    *,
    eps: float,
    projection: Projection,
    seeds: Sequence[int],
    slots: RowSlots | None = None,
    n_iter: int = 100,
    loss: Loss = "ce",
    target: torch.Tensor | None = None,
    momentum: float = 0.75,
    rho: float = 0.75,
) -> APGDResult:
    """Auto-PGD on a batch: step size 2ε halved at checkpoints when progress stalls, momentum.

    At checkpoint w_j the step of an image is halved (and its iterate reset to its best point)
    if fewer than a fraction ``rho`` of the steps since w_{j−1} increased the loss, or if its
    step was not halved at w_{j−1} and its best loss has not improved since. ``x`` is in [0, 1].
    ``slots`` name the rows (``certbench.nets.batch_invariance``; default: their positions): every
    forward, backward and projection runs in fixed-shape chunks, so an image's attack is bitwise
    the same in any batch with the same slots.
    """
    if n_iter < 1:
        raise ThreatModelError(f"n_iter={n_iter} must be at least 1.")
    if len(seeds) != x.shape[0]:
        raise ThreatModelError(f"got {len(seeds)} seeds for {x.shape[0]} images; pass one each.")
    b_size = x.shape[0]
    view = (-1,) + (1,) * (x.dim() - 1)
    slots = slots if slots is not None else RowSlots.of(range(b_size), x.device)
    if len(slots) != b_size:
        raise ThreatModelError(f"got {len(slots)} row slots for {b_size} images; pass one each.")

    def evaluate(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        point = (x + delta).detach().requires_grad_(True)
        logits = slots.forward(model, point)
        values = _loss(logits, labels, loss, target)
        (grad,) = torch.autograd.grad(values.sum(), point)
        wrong = logits.argmax(1) != labels
        return values.detach(), grad.detach(), wrong

    project = projection.bind(x, labels, slots)
    delta = project(random_start(tuple(x.shape[1:]), eps, seeds, x.device).to(x.dtype))
    values, grad, wrong = evaluate(delta)
    best_loss, best_delta, best_grad = values.clone(), delta.clone(), grad.clone()
    success = wrong.clone()
    adversarial = torch.where(wrong.view(view), delta, best_delta)
    step = torch.full((b_size,), 2 * eps, device=x.device, dtype=x.dtype)
    history = torch.empty(n_iter + 1, b_size, device=x.device, dtype=values.dtype)
    history[0] = values
    marks = checkpoints(n_iter)
    last_mark = 0
    reduced_last = torch.ones(b_size, dtype=torch.bool, device=x.device)
    best_at_last_mark = best_loss.clone()
    previous = delta
    for i in range(n_iter):
        z = project(delta + step.view(view) * grad.sign())
        weight = momentum if i > 0 else 1.0
        moved = delta + weight * (z - delta) + (1 - weight) * (delta - previous)
        previous, delta = delta, project(moved)
        values, grad, wrong = evaluate(delta)
        history[i + 1] = values
        adversarial = torch.where(wrong.view(view), delta, adversarial)
        success |= wrong
        improved = values > best_loss
        best_loss = torch.where(improved, values, best_loss)
        best_delta = torch.where(improved.view(view), delta, best_delta)
        best_grad = torch.where(improved.view(view), grad, best_grad)
        if i + 1 in marks:
            span = i + 1 - last_mark
            window = history[last_mark : i + 2]
            increases = (window[1:] > window[:-1]).sum(0)
            oscillating = increases < rho * span
            stalled = ~reduced_last & (best_at_last_mark >= best_loss)
            halve = oscillating | stalled
            step = torch.where(halve, step / 2, step)
            delta = torch.where(halve.view(view), best_delta, delta)
            grad = torch.where(halve.view(view), best_grad, grad)
            reduced_last = halve
            best_at_last_mark = best_loss.clone()
            last_mark = i + 1
    adversarial = torch.where(success.view(view), adversarial, best_delta)
    return APGDResult(delta=adversarial.detach(), success=success, best_loss=best_loss)
