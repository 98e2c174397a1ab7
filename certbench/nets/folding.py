"""BatchNorm folded into the preceding convolution of a frozen (eval-mode) model.

Why: in eval mode a BatchNorm is an affine map per channel, y = γ·(x − μ)/√(σ² + ε) + β, so a
convolution followed by it is one convolution with weights W·γ/√(σ² + ε) and a shifted bias.
Certification evaluates a fixed base classifier hundreds of thousands of times per image; in
eager mode each BatchNorm is a full extra pass over the activations (memory-bound on CPU), and
folding removes it. ``torch.compile``'s freezing does the same inside a compiled graph; this
gives the eager path (and the canonical near-tie evaluation) the same saving.

The model is traced with ``torch.fx`` and fused with ``torch.fx.experimental.optimization.fuse``
(stable since torch 1.8), on a copy: the caller's model, which may still be trained, is left as
it is. Architectures that ``torch.fx`` cannot trace (data-dependent control flow) are returned
unchanged: folding is an optimisation, never a change of the classifier beyond round-off
(the tests check logits within 1e-5 and identical certification predictions).
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch.fx.experimental.optimization import fuse
from torch.fx.proxy import TraceError

__all__ = ["batchnorm_count", "fold_batchnorm"]

_log = logging.getLogger(__name__)


def batchnorm_count(model: nn.Module) -> int:
    """Number of BatchNorm layers (1-, 2- or 3-d) in ``model``."""
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """An eval-mode copy of ``model`` with every Conv→BatchNorm pair folded into one convolution.

    Returns ``model`` itself when it has no BatchNorm or cannot be traced by ``torch.fx``
    (logged at debug level, with the reason). Refuses a model in training mode: there the
    BatchNorm uses batch statistics and is no affine map.
    """
    if model.training:
        raise ValueError("fold_batchnorm needs a model in eval mode (frozen statistics)")
    if not batchnorm_count(model):
        return model
    try:
        with torch.no_grad():
            folded = fuse(model, inplace=False)
    except (TraceError, TypeError, NotImplementedError) as error:
        _log.debug("BatchNorm not folded: %s cannot be traced (%s)", type(model).__name__, error)
        return model
    return folded.eval()
