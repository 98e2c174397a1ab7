"""The Jacobian norm of the Fourier lens (Hoffman, Roberts & Yaida 2019, "Robust Learning with
Jacobian Regularization", https://arxiv.org/abs/1908.02729, as used by Fridovich-Keil et al.,
NeurIPS 2022), taken w.r.t. the input pixels in [0, 1] (see :mod:`certbench.lens.lens` for why), and
the conversion to a normalised input space such as the paper's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from certbench.errors import LensError
from certbench.nets import RowSlots
from certbench.smoothing import derive_seed, seeded_generator

__all__ = ["JACOBIAN_UNIT", "jacobian_sq_norms", "normalised_jacobian_norm"]

JACOBIAN_UNIT = "per unit pixel, [0,1] scale"
"""The unit of the lens's Jacobian norm, as pages and the CLI state it."""


def jacobian_sq_norms(
    model: nn.Module,
    x: torch.Tensor,
    projections: int = 0,
    seeds: Sequence[int] | None = None,
    keys: torch.Tensor | None = None,
) -> np.ndarray:
    """‖J(x)‖²_F per image, J = ∂logits/∂x w.r.t. the pixels ``x`` in [0, 1], (B, C, H, W):
    through the model's own normalisation, so the figure does not depend on what an entry
    declares (module docstring). The released ``jacobian_norm.py`` differentiates w.r.t. its
    normalised z instead; :func:`normalised_jacobian_norm` converts.

    ``projections = 0``: exact, one backward pass per class (Hoffman et al.'s estimator with the
    K orthonormal basis vectors, ``JacobianReg(n=-1)``, what the released code runs).
    ``projections = n > 0``: Hoffman et al.'s random projections, K·‖vᵀJ‖² averaged over n unit
    vectors v uniform on the sphere (one per image and projection, seeded by ``seeds``), an
    unbiased estimate of ‖J‖²_F. The entry's Jacobian norm is √(mean over images).
    ``keys`` name the images (global positions; default 0..B−1): forward and backward run in
    fixed-shape chunks keyed by them (``certbench.nets.batch_invariance``: a ReLU near 0 flipped by
    another kernel's round-off changed one image's Jacobian by 0.1 %), so an image's norm is
    bitwise the same in any batch with the same key.
    """
    rows = len(x)
    slots = RowSlots.of(keys if keys is not None else range(rows), x.device)
    z = x.to(torch.float32).detach().requires_grad_(True)
    with torch.enable_grad():
        logits = slots.forward(model, z)
        classes = logits.shape[1]
        total = torch.zeros(len(z), dtype=torch.float64, device=z.device)
        count = classes if projections == 0 else projections
        for r in range(count):
            v = torch.zeros_like(logits)
            if projections == 0:
                v[:rows, r] = 1.0
                scale = 1.0
            else:
                v[:rows] = _unit_vectors(seeds, r, classes, rows).to(logits.device, logits.dtype)
                scale = classes / projections
            (grad,) = torch.autograd.grad(logits, z, v, retain_graph=r + 1 < count)
            total += scale * grad.double().flatten(1).pow(2).sum(1)
    return total[:rows].cpu().numpy()


def _unit_vectors(seeds: Sequence[int] | None, r: int, classes: int, count: int) -> torch.Tensor:
    if seeds is None or len(seeds) != count:
        raise LensError("random Jacobian projections need one seed per image")
    rows = []
    for s in seeds:
        g = seeded_generator(derive_seed(int(s), r))
        v = torch.randn(classes, generator=g, dtype=torch.float64)
        rows.append(v / v.norm())
    return torch.stack(rows)


def normalised_jacobian_norm(pixel_norm: float, std: Sequence[float]) -> tuple[float, float]:
    """Bounds on the Jacobian norm in a normalised space of per-channel ``std`` (the paper's
    convention) from the pixel-space norm this module reports.

    ∂logits/∂z_c = s_c·∂logits/∂x_c, so ‖J_z‖²_F = Σ_c s_c²·‖J_x^(c)‖²_F: exactly s·‖J_x‖ when
    every channel has the same std s (the bounds coincide), and between min_c s_c·‖J_x‖ and
    max_c s_c·‖J_x‖ otherwise (the split over channels is not recorded). The mean plays no part.
    """
    if not std or any(s <= 0 for s in std):
        raise LensError(f"std must hold positive values, got {list(std)}")
    return min(std) * pixel_norm, max(std) * pixel_norm
