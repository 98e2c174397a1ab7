"""Lazy projection onto the PD threat's feasible set (Muthukumar et al. 2025, arXiv:2501.18098, §6):
feasible, not nearest.

δ is clipped to the ℓ∞ ball intersected with the [0, 1] image box, then scaled towards 0 by
min(1, ε/d_PD). This is the projection of the paper's protocol (ℓ∞ attacks' results lazily
projected onto the PD sublevel set, ``certbench.pd.evaluation``), a cheap alternative inside
the PD-aware attack, and the final safeguard of the exact projection
(``certbench.pd.exact_projection``), which it keeps strictly feasible.
"""

from __future__ import annotations

import math

import torch

from certbench.nets import RowSlots
from certbench.pd.threat import PDThreat


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
    slots: RowSlots | None = None,
) -> torch.Tensor:
    """Clip δ to the ℓ∞/box set, then scale by min(1, ε/d_PD): feasible, not nearest.

    The box contains 0, so scaling towards 0 keeps the clipped point inside it. ``slots``: the
    rows' keys (``certbench.nets.batch_invariance``), for batch-independent values.
    """
    lo, hi = linf_box(x, eps_inf)
    clipped = torch.maximum(torch.minimum(delta, hi), lo)
    value = threat(x, clipped, labels, slots).to(clipped.device, clipped.dtype)
    scale = torch.where(value > eps_pd, eps_pd / value.clamp_min(1e-30), torch.ones_like(value))
    return clipped * scale.view(-1, *([1] * (clipped.dim() - 1)))
