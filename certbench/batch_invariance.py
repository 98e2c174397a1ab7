"""Forward passes whose per-row results do not depend on how many rows share the batch.

CPU kernels (oneDNN convolutions, MKL GEMMs) take other code paths for batches of one or two
rows than for larger ones, and the last float bits of a row's output change with them. Attacks
amplify that: a sign step (APGD, the weather search) or a ReLU near zero (a Jacobian) turns a
round-off difference into a different trajectory, so a shard holding one image disagreed with an
unsharded run (seen for the PD attack's ``linf_pd_threat``, 5e-7 relative, the lens Jacobian,
0.1 %, and the weather search). Zero-padding every batch to at least ``MIN_ROWS`` rows keeps each
row on the same kernels whatever the sharding; checked bitwise for ResNet-20 and the tests' CNN
(``tests/certbench/test_batch_invariance.py``). The padded rows cost nothing once a batch holds
``MIN_ROWS`` images, which every full-size batch does. The GEMMs of the PD threat and of its
exact projection's dual iterations are padded alike (:func:`padded_matmul`).

The memory layout of the weights selects kernels too: channels-last and contiguous convolutions
differ in the last bits of the logits. :func:`canonical_layout` gives an attack one layout
whatever an earlier computation left its model in.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "MIN_ROWS",
    "PaddedForward",
    "canonical_layout",
    "pad_rows",
    "padded_forward",
    "padded_matmul",
]

MIN_ROWS = 8
"""Every padded batch has at least this many rows."""


def pad_rows(inputs: torch.Tensor, rows: int = MIN_ROWS) -> torch.Tensor:
    """``inputs`` with zero rows appended up to ``rows`` (unchanged when it has enough)."""
    missing = rows - inputs.shape[0]
    if missing <= 0:
        return inputs
    return torch.cat([inputs, inputs.new_zeros((missing, *inputs.shape[1:]))])


def padded_forward(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """``model(inputs)`` computed on a batch padded to ``MIN_ROWS``; padded rows are dropped, so
    gradients flow to the real rows only."""
    return model(pad_rows(inputs))[: inputs.shape[0]]


def padded_matmul(rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """``rows @ matrix`` computed on ``rows`` padded to ``MIN_ROWS``: a row's products do not
    depend on how many rows share the GEMM (MKL takes another path for one to three rows, and
    the last bits of a row's products change with it)."""
    return (pad_rows(rows) @ matrix)[: rows.shape[0]]


def canonical_layout(model: nn.Module) -> nn.Module:
    """``model`` with its 4-D weights converted in place to channels-last, and returned.

    ``certify`` converts a model's weights to channels-last in place (so do the weather, lens and
    Fourier computations), and a service worker caches one model object per process for all its
    shards. oneDNN runs other convolution kernels for the two layouts (the tests' ResNet-20: logits
    3e-6 apart), so without this an attack's records would depend on whether a certification
    shard ran before it in the same process, and a direct run from the revealed seed could
    disagree with the service's records. Models without convolutions are unchanged.
    """
    return model.to(memory_format=torch.channels_last)


class PaddedForward(nn.Module):
    """A model whose every forward is :func:`padded_forward` (for code that calls ``model(x)``
    many times, such as an attack loop)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return padded_forward(self.model, inputs)
