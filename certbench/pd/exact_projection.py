"""Exact (Euclidean) projection onto {d_PD ≤ ε_pd} ∩ ℓ∞(ε_inf) ∩ [0, 1]-box by dual ascent.

The PD sublevel set at an input is an intersection of halfspaces ⟨δ, u_j⟩ ≤ b_j, one per anchor
of another class (Muthukumar et al. 2025, arXiv:2501.18098, §3.2; ``certbench.pd.threat``).
:class:`Halfspaces` describes them for a batch once, :func:`project_exact` solves the dual
of the projection with FISTA and adaptive restart, image by image (each image stops on its own
tolerance, so its result does not depend on its batch), and every product with the anchor matrix
runs in fixed-shape chunks keyed by the rows' slots (``certbench.nets.batch_invariance``). The
PD-aware attack (``certbench.pd.apgd``) projects
every iterate this way; the lazy projection (``certbench.pd.lazy_projection``) is its safeguard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from certbench.nets import RowSlots
from certbench.pd.lazy_projection import linf_box, project_lazy
from certbench.pd.threat import PDThreat


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
    slots: RowSlots
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
        return self.slots.matmul(w, self.threat.anchors) - w.sum(1, keepdim=True) * self.flat_x

    def slack(self, d: torch.Tensor) -> torch.Tensor:
        """Uδ − b on the active rows, 0 elsewhere (GEMMs in fixed-shape chunks, as everywhere)."""
        along = self.slots.matmul(d, self.threat.anchors.T) - (d * self.flat_x).sum(1, keepdim=True)
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
    slots: RowSlots | None = None,
) -> Halfspaces:
    """Describe {d_PD ≤ ε_pd} ∩ ℓ∞(ε_inf) ∩ box at each input of a batch. ``slots``: the rows'
    keys (``certbench.nets.batch_invariance``); default, the batch's own positions."""
    flat_x, labels_d = threat._prepare(x, labels)
    slots = slots if slots is not None else RowSlots.positional(flat_x.shape[0])
    lo, hi = linf_box(flat_x, eps_inf)
    coef, sq = threat.geometry(flat_x, labels_d, slots)
    norm = sq.sqrt()
    active = coef > 0
    inv_norm = torch.where(active, 1.0 / norm, torch.zeros_like(norm))
    # ⟨δ, u_j⟩ ≤ ε·β·w·‖x̃−x‖  ⇔  coef·⟨δ, x̃−x⟩/‖x̃−x‖² ≤ ε.
    bound = torch.where(active, eps_pd * norm / coef.clamp_min(1e-30), torch.zeros_like(norm))
    lipschitz = _gram_norm(threat.anchors, flat_x, inv_norm, slots, power_iterations)
    return Halfspaces(
        threat=threat,
        slots=slots,
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
    slots: RowSlots | None = None,
) -> ExactProjection:
    """Euclidean projection onto {d_PD ≤ ε_pd} ∩ ℓ∞(ε_inf) ∩ [0,1]-box by dual ascent.

    The dual of min ½‖δ − z‖² s.t. ⟨δ, u_j⟩ ≤ b_j, lo ≤ δ ≤ hi is a concave maximisation over
    λ ≥ 0 with δ(λ) = clip(z − Uᵀλ, lo, hi) and gradient Uδ(λ) − b; we run FISTA with adaptive
    restart on it, from ``warm_start`` multipliers if given (consecutive attack iterates have
    nearby optima). Each image stops when it is feasible and complementary to ``tol`` (in ℓ2
    units of δ), so its result does not depend on its batch; ``iterations`` counts the steps of
    the slowest. ``sets`` reuses the geometry of :func:`halfspaces` across calls (and its
    ``slots``; otherwise ``slots`` name the rows, as in :func:`halfspaces`).
    """
    shape = delta.shape
    b_size = shape[0]
    hs = sets or halfspaces(threat, x, labels, eps_pd=eps_pd, eps_inf=eps_inf, slots=slots)
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
    safe = project_lazy(
        threat, x, raw_shaped, labels, eps_pd=eps_pd, eps_inf=eps_inf, slots=hs.slots
    )
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
    anchors: torch.Tensor,
    flat_x: torch.Tensor,
    inv_norm: torch.Tensor,
    slots: RowSlots,
    iters: int = 20,
) -> torch.Tensor:
    """Per-image upper estimate of ‖U Uᵀ‖₂ by power iteration (×1.2 margin, ≤ ‖U‖_F²)."""
    v = (inv_norm > 0).to(anchors.dtype)
    estimate = torch.ones(flat_x.shape[0], device=anchors.device, dtype=anchors.dtype)
    for _ in range(iters):
        w = v * inv_norm
        ut_v = slots.matmul(w, anchors) - w.sum(1, keepdim=True) * flat_x
        uu_v = (slots.matmul(ut_v, anchors.T) - (ut_v * flat_x).sum(1, keepdim=True)) * inv_norm
        estimate = uu_v.norm(dim=1) / v.norm(dim=1).clamp_min(1e-30)
        v = uu_v / uu_v.norm(dim=1, keepdim=True).clamp_min(1e-30)
    frobenius = (inv_norm > 0).sum(1).to(anchors.dtype)
    return torch.minimum(1.2 * estimate, frobenius).clamp_min(1e-12)
